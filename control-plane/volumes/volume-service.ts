// Volumes: their records (the store), their files (volume-disk.ts), their
// tokens (derived from the server's seed, as envd's are: nothing secret is
// stored), who may destroy them (nobody while a sandbox that is not killed
// mounts one), and what a create's `volumeMounts` become for its runtime.
import { timingSafeEqual } from "node:crypto";
import type { Logger } from "pino";
import { ControlPlaneError } from "../domain/errors.js";
import type { SandboxRecord } from "../domain/sandbox.js";
import { mountPathProblem, normalMountPath, volumeNameProblem, type VolumeBinding, type VolumeMount, type VolumeRecord } from "../domain/volume.js";
import { deriveToken, randomId } from "../manager/ids.js";
import type { Store } from "../store/store.js";
import { createVolumeDisk, mountVolumeDisk, removeVolumeDisk, volumeLayout } from "./volume-disk.js";
import { VolumeFs, DEFAULT_OWNER, type VolumeIds } from "./volume-fs.js";

export interface VolumeServiceOptions {
  store: Store;
  dataDir: string;
  seed: Buffer;
  /** The sandboxes' id shift (the process runtime's); absent: volumes cannot be made here, `unsupported` says why. */
  ids?: VolumeIds;
  unsupported?: string;
  /** A new volume's size unless its create says (MiB). */
  defaultSizeMB: number;
  /** The sandboxes that are not killed (every node's), for the destroy check. */
  liveSandboxes: () => Promise<SandboxRecord[]>;
  /** This host's name when the store is shared (Postgres): its volumes carry it, and it mounts only its own. */
  node?: string;
  log: Logger;
}

export const MIN_VOLUME_MB = 16;
export const MAX_VOLUME_MB = 16 * 1024 * 1024;

/** What a create holds while it starts: its bindings, and a release once its record says what it mounts. */
export interface VolumeLease {
  bindings: VolumeBinding[];
  release(): void;
}

export class VolumeService {
  /** Volume id → creates between resolving their mounts and their record being live. */
  private readonly pending = new Map<string, number>();

  constructor(private readonly o: VolumeServiceOptions) {}

  private supported(): VolumeIds {
    if (!this.o.ids) throw new ControlPlaneError("invalid", `volumes are not available on this server: ${this.o.unsupported ?? "unknown reason"}`);
    return this.o.ids;
  }

  /** Mounts every volume's disk (after a host reboot they are not; after a server restart they still are). */
  async start(): Promise<void> {
    if (!this.o.ids) return;
    for (const v of await this.o.store.listVolumes()) {
      if (v.node !== this.o.node) continue; // another host's disk
      await mountVolumeDisk(volumeLayout(this.o.dataDir, v.id)).catch((err: unknown) => this.o.log.error({ err, volumeId: v.id }, "cannot mount a volume: its sandboxes and file API will fail"));
    }
  }

  token(id: string): string {
    return deriveToken(this.o.seed, "volume", id);
  }

  async create(name: unknown, sizeMB: unknown): Promise<VolumeRecord> {
    const ids = this.supported();
    const problem = volumeNameProblem(name);
    if (problem) throw new ControlPlaneError("invalid", problem);
    const size = sizeMB === undefined ? this.o.defaultSizeMB : sizeMB;
    if (typeof size !== "number" || !Number.isInteger(size) || size < MIN_VOLUME_MB || size > MAX_VOLUME_MB) {
      throw new ControlPlaneError("invalid", `sizeMB ${JSON.stringify(sizeMB)}: expected a whole number of MiB from ${MIN_VOLUME_MB} to ${MAX_VOLUME_MB}`);
    }
    if (await this.o.store.volumeByName(name as string)) throw new ControlPlaneError("conflict", `a volume named '${name as string}' exists: pick another name, or use it (Volume.connect)`);
    const rec: VolumeRecord = { id: `vol_${randomId(16)}`, name: name as string, sizeMB: size, createdAt: Date.now(), ...(this.o.node !== undefined ? { node: this.o.node } : {}) };
    const layout = volumeLayout(this.o.dataDir, rec.id);
    await createVolumeDisk(layout, size, { uid: ids.base + DEFAULT_OWNER, gid: ids.base + DEFAULT_OWNER }).catch((err: Error) => {
      throw new ControlPlaneError("internal", `cannot create volume '${rec.name}': ${err.message}`);
    });
    if (!(await this.o.store.addVolume(rec))) {
      await removeVolumeDisk(layout);
      throw new ControlPlaneError("conflict", `a volume named '${rec.name}' exists: pick another name, or use it (Volume.connect)`);
    }
    this.o.log.info({ volumeId: rec.id, name: rec.name, sizeMB: size }, "volume created");
    return rec;
  }

  list(): Promise<VolumeRecord[]> {
    return this.o.store.listVolumes();
  }

  async get(id: string): Promise<VolumeRecord> {
    const v = await this.o.store.getVolume(id);
    if (!v) throw new ControlPlaneError("not_found", `volume '${id}' not found`);
    return v;
  }

  /** The sandboxes (not killed) that mount the volume. */
  private async users(v: VolumeRecord): Promise<string[]> {
    const ids = new Set<string>();
    for (const s of await this.o.liveSandboxes()) {
      if (s.state !== "killed" && s.volumeMounts?.some((m) => m.name === v.name)) ids.add(s.id);
    }
    return [...ids];
  }

  /** Removes the volume and its files; refused (409) while a sandbox that is not killed mounts it. */
  async destroy(id: string): Promise<void> {
    const v = await this.get(id);
    const users = await this.users(v);
    if (users.length || this.pending.get(v.id)) {
      const who = users.length ? `sandbox${users.length > 1 ? "es" : ""} ${users.slice(0, 5).join(", ")}${users.length > 5 ? ", …" : ""}` : "a sandbox being created";
      throw new ControlPlaneError("conflict", `volume '${v.name}' is mounted by ${who} (running or paused): kill ${users.length > 1 ? "them" : "it"} first, then destroy the volume`);
    }
    await this.o.store.deleteVolume(v.id);
    await removeVolumeDisk(volumeLayout(this.o.dataDir, v.id)).catch((err: unknown) => this.o.log.warn({ err, volumeId: v.id }, "cannot remove a destroyed volume's files"));
    this.o.log.info({ volumeId: v.id, name: v.name }, "volume destroyed");
  }

  /** The volume a bearer token opens, else 401 (404 for a volume that does not exist). */
  async authorize(id: string, authorization: string | undefined): Promise<{ volume: VolumeRecord; fs: VolumeFs }> {
    const m = /^Bearer\s+(\S+)$/i.exec(authorization ?? "");
    if (!m) throw new ControlPlaneError("unauthenticated", "the volume file API needs the volume's token: 'Authorization: Bearer <token>' (the SDK's Volume has it; Volume.connect(id) fetches it)");
    const volume = await this.get(id);
    const want = Buffer.from(this.token(volume.id));
    const got = Buffer.from(m[1]!);
    if (got.length !== want.length || !timingSafeEqual(got, want)) throw new ControlPlaneError("unauthenticated", `invalid token for volume '${id}': use the token Volume.create or Volume.connect returned`);
    return { volume, fs: new VolumeFs(volumeLayout(this.o.dataDir, volume.id).files, volume.name, this.supported()) };
  }

  /** Checks a create's mounts (names exist, paths are fine and distinct) and holds the volumes until release(). */
  async acquire(mounts: VolumeMount[]): Promise<VolumeLease> {
    if (mounts.length === 0) return { bindings: [], release: () => undefined };
    this.supported();
    const bindings: VolumeBinding[] = [];
    const paths = new Set<string>();
    for (const m of mounts) {
      const problem = volumeNameProblem(m.name) ?? mountPathProblem(m.path);
      if (problem) throw new ControlPlaneError("invalid", `volumeMounts: ${problem}`);
      const path = normalMountPath(m.path);
      if ([...paths].some((p) => p === path || p.startsWith(`${path}/`) || path.startsWith(`${p}/`))) throw new ControlPlaneError("invalid", `volumeMounts: '${path}' overlaps another mount of this sandbox: give each volume its own directory`);
      paths.add(path);
      const v = await this.o.store.volumeByName(m.name);
      if (!v) throw new ControlPlaneError("invalid", `volumeMounts: no volume named '${m.name}': create it first (Volume.create('${m.name}'))`);
      bindings.push({ volumeId: v.id, name: v.name, hostPath: volumeLayout(this.o.dataDir, v.id).files, path });
    }
    for (const b of bindings) {
      await mountVolumeDisk(volumeLayout(this.o.dataDir, b.volumeId)).catch((err: Error) => {
        throw new ControlPlaneError("internal", `volume '${b.name}' cannot be mounted: ${err.message}`);
      });
    }
    for (const b of bindings) this.pending.set(b.volumeId, (this.pending.get(b.volumeId) ?? 0) + 1);
    let released = false;
    return {
      bindings,
      release: () => {
        if (released) return;
        released = true;
        for (const b of bindings) {
          const n = (this.pending.get(b.volumeId) ?? 1) - 1;
          if (n > 0) this.pending.set(b.volumeId, n);
          else this.pending.delete(b.volumeId);
        }
      },
    };
  }
}
