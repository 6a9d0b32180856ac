import { readdirSync } from "node:fs";
import { join } from "node:path";
import type { SandboxBoot } from "../domain/template.js";
import { findTemplateImage, imagesDir } from "./layout.js";

/**
 * The templates sandboxes can be created from: `base` always (the process
 * runtime runs it on the host's filesystem when it is not built), plus every
 * template built on this host, looked up when asked (a template built while
 * the server runs is usable at once).
 */
export class TemplateCatalog {
  constructor(readonly dir = imagesDir()) {}

  /** Names starting with `@` are builds of API templates (templates/template-service.ts), not templates of their own. */
  has(id: string): boolean {
    if (id.startsWith("@")) return false;
    return id === "base" || findTemplateImage(id, this.dir) !== undefined;
  }

  /** A built template by its name: its image is the image cache's entry of that name, with its definition's start and ready commands. */
  resolve(ref: string): { templateId: string; alias: string; boot: SandboxBoot } | undefined {
    return this.has(ref) ? { templateId: ref, alias: ref, boot: this.boot(ref) } : undefined;
  }

  /** What a sandbox of the built template `name` boots. */
  boot(name: string): SandboxBoot {
    const def = findTemplateImage(name, this.dir)?.manifest.definition as { start?: unknown; ready?: unknown } | undefined;
    return {
      image: name,
      ...(typeof def?.start === "string" ? { startCmd: def.start } : {}),
      ...(typeof def?.ready === "string" ? { readyCmd: def.ready } : {}),
    };
  }

  names(): string[] {
    let built: string[] = [];
    try {
      built = readdirSync(join(this.dir, "templates"))
        .filter((f) => f.endsWith(".current"))
        .map((f) => f.slice(0, -".current".length));
    } catch {
      // nothing built yet
    }
    return [...new Set(["base", ...built])].filter((n) => this.has(n)).sort();
  }

  /** The runtime a built template's definition asks for (`runtime:`), if any. */
  runtimeOf(id: string): string | undefined {
    const def = findTemplateImage(id, this.dir)?.manifest.definition as { runtime?: unknown } | undefined;
    return typeof def?.runtime === "string" ? def.runtime : undefined;
  }
}
