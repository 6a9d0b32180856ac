// Templates built from a definition on the server (rootfs/templates/*.yaml,
// `base` first), shown through E2B's template API as public, read-only
// templates with one build: the image in the cache, tagged `default`.
import { ENVD_VERSION } from "../../envd/version.js";
import type { TemplateBuildRecord, TemplateRecord } from "../domain/template.js";
import type { TemplateCatalog } from "../images/catalog.js";
import { findTemplateImage } from "../images/layout.js";
import { builtInBuildId, DEFAULT_TAG } from "./names.js";

/** The shape a built-in template's sandboxes get. */
export interface BuiltInDefaults {
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
}

/** The built-in template `name`, or undefined when the server has no definition of that name. */
export function builtInTemplate(catalog: TemplateCatalog, defaults: BuiltInDefaults, name: string): TemplateRecord | undefined {
  if (name.startsWith("@") || !catalog.has(name)) return undefined;
  const image = findTemplateImage(name, catalog.dir);
  const at = image ? Date.parse(image.manifest.builtAt) : 0;
  return {
    id: name,
    names: [name],
    public: true,
    ...defaults,
    createdAt: at,
    updatedAt: at,
    spawnCount: 0,
    buildCount: image ? 1 : 0,
    builtIn: true,
  };
}

/** A built-in template's one build: its image in the cache, or undefined while it is not built. */
export function builtInBuild(catalog: TemplateCatalog, defaults: BuiltInDefaults, t: TemplateRecord): TemplateBuildRecord | undefined {
  const image = findTemplateImage(t.id, catalog.dir);
  if (!image) return undefined;
  return {
    id: builtInBuildId(image.hash),
    templateId: t.id,
    status: "ready",
    ...defaults,
    tags: [DEFAULT_TAG],
    result: { ...catalog.boot(t.id), rootfsBytes: image.manifest.rootfsBytes },
    envdVersion: ENVD_VERSION,
    createdAt: t.createdAt,
    updatedAt: t.createdAt,
    finishedAt: t.createdAt,
  };
}
