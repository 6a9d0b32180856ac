// Warm start: per template and sandbox shape, a checkpoint of a sandbox whose
// envd has booted and answered, so a create restores it (runsc restore, about
// a second) instead of booting one (runsc run, the init, Node, envd). Built in
// the background after the first cold create of that shape, under
// <data dir>/gvisor-warm/<key>/; a create that finds none ready starts cold.
// The image holds no access token (envd gets its first one from the new
// sandbox's /init) and the restore takes its own id, hostname and network.
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import { LocalEndpoint } from "../../transport/local-endpoint.js";
import { EnvdClient } from "../../transport/envd-client.js";
import type { InstanceSpec } from "../runtime.js";
import type { GvisorInstance } from "./instance.js";
import { snapshotCheckpoint, snapshotDisk } from "./rootfs.js";

export interface WarmImage {
  disk: string;
  checkpoint: string;
}

/** What a warm image fits: the template's build and the sandbox's shape (its memory, CPU and disk are in the image). */
export function warmKey(spec: InstanceSpec, templateBuild: string): string {
  return `${templateBuild}-c${spec.cpuCount}-m${spec.memoryMB}-d${spec.diskSizeMB}${spec.warmUp ? `-w${spec.warmUp.key}` : ""}`.replace(/[^A-Za-z0-9._-]/g, "_");
}

export class WarmImages {
  private readonly building = new Map<string, Promise<void>>();

  constructor(
    /** Starts a sandbox cold (the runtime's own create). */
    private readonly coldStart: (spec: InstanceSpec) => Promise<GvisorInstance>,
  ) {}

  /** `<data dir>/gvisor-warm`, from a sandbox's directory (`<data dir>/sandboxes/<id>`). */
  static root(sandboxDir: string): string {
    return join(dirname(dirname(sandboxDir)), "gvisor-warm");
  }

  /** The image for `key` when one is built. */
  ready(root: string, key: string): WarmImage | undefined {
    const dir = join(root, key);
    const image = { disk: snapshotDisk(dir), checkpoint: snapshotCheckpoint(dir) };
    return existsSync(image.disk) && existsSync(image.checkpoint) ? image : undefined;
  }

  /** A restore from it failed: build it again next time. */
  discard(root: string, key: string): void {
    rmSync(join(root, key), { recursive: true, force: true });
  }

  /** Builds the image for `key` in the background, once (a failure is logged; creates go on cold). */
  ensure(root: string, key: string, spec: InstanceSpec): void {
    if (this.building.has(key) || this.ready(root, key)) return;
    const log = spec.log.child({ warmImage: key });
    const done = this.build(root, key, spec, log)
      .catch((err: unknown) => log.warn({ err }, "building a warm-start image failed: gVisor sandboxes of this shape start cold"))
      .finally(() => this.building.delete(key));
    this.building.set(key, done);
  }

  /** Waits for the builds under way (the server is stopping: none is left half-made). */
  async settle(): Promise<void> {
    await Promise.all(this.building.values());
  }

  private async build(root: string, key: string, spec: InstanceSpec, log: Logger): Promise<void> {
    mkdirSync(root, { recursive: true, mode: 0o700 });
    // Leftovers of a build cut short (a restart): start over.
    for (const name of readdirSync(root)) if (name.startsWith(".tmp-")) rmSync(join(root, name), { recursive: true, force: true });
    const id = `warm${randomBytes(8).toString("hex")}`;
    const tmp = join(root, `.tmp-${key}`);
    const started = Date.now();
    const inst = await this.coldStart({ ...spec, sandboxId: id, dir: join(root, `.tmp-sandbox-${id}`), allowInternetAccess: false, egress: undefined, background: true, log });
    const endpoint = new LocalEndpoint(id, inst.socketPath);
    try {
      await new EnvdClient().waitReady(endpoint, 60_000, () => inst.alive(), () => inst.vsockReady());
      // The template's start command, running (and ready) in the checkpoint.
      await spec.warmUp?.run(endpoint);
      mkdirSync(tmp, { recursive: true, mode: 0o700 });
      await inst.snapshot(tmp, { kind: "memory", paused: false });
      renameSync(tmp, join(root, key));
      log.info({ ms: Date.now() - started }, "warm-start image built: gVisor sandboxes of this shape are restored from it");
    } finally {
      endpoint.close();
      rmSync(tmp, { recursive: true, force: true });
      await inst.kill();
    }
  }
}
