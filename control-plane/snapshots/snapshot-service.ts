import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { carryHold } from "../images/image-refs.js";
import { randomId } from "../manager/ids.js";
import type { SandboxManager } from "../manager/sandbox-manager.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { CreateSandboxInput, SandboxRecord } from "../domain/sandbox.js";
import type { Instance } from "../runtimes/runtime.js";
import { findRuntime } from "../runtimes/registry.js";
import type { SnapshotKind, SnapshotSource } from "../domain/snapshot.js";
import type { Store } from "../store/store.js";
import { DEFAULT_TAG, nameProblem, parseRef, refMatches, snapshotId } from "./names.js";
import type { SnapshotRecord } from "../domain/snapshot.js";

export interface SnapshotServiceOptions {
  store: Store;
  manager: SandboxManager;
  dataDir: string;
  /** Template names: a snapshot may not take one as its name. */
  templates: { has(id: string): boolean };
  log: Logger;
  /** This host's name when the store is shared (Postgres): its snapshots carry it, and only its own are swept. */
  node?: string;
}

/** One fork's outcome: its sandbox, or why it did not start. */
export type ForkOutcome = { sandbox: SandboxRecord } | { error: Error };

/**
 * E2B's snapshots and fork over the runtimes' snapshot hook. A snapshot is
 * captured into a temporary directory and renamed into place before its
 * record is written, so a failure (or a crash) leaves nothing half-made; a
 * sandbox started from one works on its own copy, so deleting a snapshot
 * never touches a sandbox made from it. Builds still being copied from are
 * removed when the last copy is done.
 */
export class SnapshotService {
  private readonly root: string;
  private readonly using = new Map<string, number>();
  private readonly doomed = new Set<string>();
  private naming: Promise<unknown> = Promise.resolve();

  constructor(private readonly o: SnapshotServiceOptions) {
    this.root = join(o.dataDir, "snapshots");
  }

  /** Drops this host's records whose files are gone and files no record names (a capture cut short by a crash). */
  async start(): Promise<void> {
    mkdirSync(this.root, { recursive: true, mode: 0o700 });
    const known = new Set<string>();
    for (const s of await this.o.store.listSnapshots()) {
      if (s.node !== this.o.node) continue; // another host's files: not ours to judge
      if (existsSync(join(this.root, s.build))) known.add(s.build);
      else {
        await this.o.store.deleteSnapshot(s.id, s.tag);
        this.o.log.warn({ snapshotId: snapshotId(s), build: s.build }, "snapshot files are gone: record dropped");
      }
    }
    for (const name of readdirSync(this.root)) {
      if (known.has(name)) continue;
      rmSync(join(this.root, name), { recursive: true, force: true });
      this.o.log.info({ build: name }, "removed a leftover snapshot directory");
    }
  }

  private dir(build: string): string {
    return join(this.root, build);
  }

  /** A snapshot a reference names (id or name, namespace and tag optional), if any. */
  async resolve(ref: string): Promise<SnapshotRecord | undefined> {
    const r = parseRef(ref);
    return r ? (await this.o.store.listSnapshots()).find((s) => refMatches(s, r, true)) : undefined;
  }

  isTemplate(id: string): boolean {
    return this.o.templates.has(id);
  }

  /**
   * What a name given as a create's templateID is (E2B's template alias): a
   * template built on this server (public: every key may create from it) or
   * a snapshot (the team's own), or undefined.
   */
  async alias(name: string): Promise<{ templateID: string; public: boolean } | undefined> {
    if (this.isTemplate(name)) return { templateID: name, public: true };
    const snap = await this.resolve(name);
    return snap ? { templateID: snapshotId(snap), public: false } : undefined;
  }

  /** Whether a create's templateID names a snapshot (a template of that name wins). */
  async names(templateId: string): Promise<boolean> {
    return !this.o.templates.has(templateId) && (await this.resolve(templateId)) !== undefined;
  }

  /** Newest first; `name` matches ids and names, a tag only when it carries one. */
  async list(filter: { sandboxId?: string; name?: string } = {}): Promise<SnapshotRecord[]> {
    const all = await this.o.store.listSnapshots(filter.sandboxId ? { sandboxId: filter.sandboxId } : {});
    if (filter.name === undefined) return all;
    const r = parseRef(filter.name);
    return r ? all.filter((s) => refMatches(s, r, false)) : [];
  }

  /** Captures a sandbox's state into a new build directory (the instance says which kinds it can take). */
  private capture(sandboxId: string, prefix: string, memory?: boolean): Promise<{ rec: SandboxRecord; build: string; kind: SnapshotKind; sizeBytes: number }> {
    return this.o.manager.withInstance(sandboxId, async (rec, inst) => {
      const kind = chooseKind(rec, inst, memory);
      const build = `${prefix}${randomId(16)}`;
      const tmp = this.dir(`.tmp-${build}`);
      const t0 = Date.now();
      mkdirSync(tmp, { recursive: true, mode: 0o700 });
      try {
        await inst.snapshot!(tmp, { kind, paused: rec.state === "paused" }).finally(() => {
          if (kind === "memory") this.o.manager.dropConnections(sandboxId);
        });
        renameSync(tmp, this.dir(build));
        // The snapshot's files depend on the template build the sandbox runs on (a layer over it, or
        // an overlay backed by it): that build stays while the snapshot does.
        carryHold(this.o.manager.dir(sandboxId), this.dir(build), this.o.log);
      } catch (err) {
        rmSync(tmp, { recursive: true, force: true });
        rmSync(this.dir(build), { recursive: true, force: true });
        this.o.log.error({ err, sandboxId }, "snapshot failed");
        throw new ControlPlaneError("internal", `failed to snapshot sandbox '${sandboxId}': ${(err as Error).message}`);
      }
      const sizeBytes = diskUsage(this.dir(build));
      this.o.log.info({ sandboxId, build, kind, sizeBytes, ms: Date.now() - t0 }, "sandbox snapshotted");
      return { rec, build, kind, sizeBytes };
    });
  }

  /** POST /sandboxes/{id}/snapshots: a snapshot, named or not; a name that exists gets this new build. `memory`: see chooseKind. */
  async create(sandboxId: string, name?: string, memory?: boolean): Promise<SnapshotRecord> {
    const ref = name === undefined ? undefined : parseRef(name);
    if (name !== undefined) {
      const problem = nameProblem(ref, name);
      if (problem) throw new ControlPlaneError("invalid", problem);
      if (this.o.templates.has(ref!.base)) throw new ControlPlaneError("invalid", `invalid snapshot name '${name}': a template is named '${ref!.base}'`);
    }
    const { rec, build, kind, sizeBytes } = await this.capture(sandboxId, "", memory);
    // Names are claimed one at a time: two snapshots under one new name share its id.
    const next = this.naming.then(async () => {
      const tag = ref?.tag ?? DEFAULT_TAG;
      const existing = ref ? (await this.o.store.listSnapshots()).find((s) => s.name === ref.base) : undefined;
      const replaced = existing ? await this.o.store.getSnapshot(existing.id, tag) : undefined;
      const snap: SnapshotRecord = {
        id: existing?.id ?? randomId(20),
        tag,
        ...(ref ? { name: ref.base } : {}),
        sandboxId,
        templateId: rec.templateId,
        ...(rec.boot ? { boot: rec.boot } : {}),
        runtime: rec.runtime,
        kind,
        build,
        createdAt: Date.now(),
        sizeBytes,
        cpuCount: rec.cpuCount,
        memoryMB: rec.memoryMB,
        diskSizeMB: rec.diskSizeMB,
        ...(this.o.node !== undefined ? { node: this.o.node } : {}),
      };
      await this.o.store.putSnapshot(snap);
      if (replaced) this.removeBuild(replaced.build);
      this.o.log.info({ sandboxId, snapshotId: snapshotId(snap), replaced: replaced?.build }, "snapshot created");
      return snap;
    });
    this.naming = next.catch(() => undefined);
    return next.catch((err: unknown) => {
      this.removeBuild(build);
      throw err;
    });
  }

  /** DELETE /templates/{id}: false when no snapshot answers to the reference. */
  async delete(ref: string): Promise<boolean> {
    const snap = await this.resolve(ref);
    if (!snap || !(await this.o.store.deleteSnapshot(snap.id, snap.tag))) return false;
    this.removeBuild(snap.build);
    this.o.log.info({ snapshotId: snapshotId(snap), sandboxId: snap.sandboxId }, "snapshot deleted");
    return true;
  }

  private removeBuild(build: string): void {
    if (this.using.get(build)) this.doomed.add(build);
    else rmSync(this.dir(build), { recursive: true, force: true });
  }

  /** Runs `fn` with a build kept on disk until it returns. */
  private async holding<T>(build: string, fn: () => Promise<T>): Promise<T> {
    this.using.set(build, (this.using.get(build) ?? 0) + 1);
    try {
      return await fn();
    } finally {
      const left = (this.using.get(build) ?? 1) - 1;
      if (left > 0) this.using.set(build, left);
      else {
        this.using.delete(build);
        if (this.doomed.delete(build)) rmSync(this.dir(build), { recursive: true, force: true });
      }
    }
  }

  private source(build: string, kind: SnapshotKind, runtime: string, sandboxId: string): SnapshotSource {
    return { kind, runtime, dir: this.dir(build), sandboxId };
  }

  /** POST /sandboxes with a snapshot's id or name as templateID: a new sandbox on its files. */
  async createSandbox(input: CreateSandboxInput): Promise<SandboxRecord> {
    const snap = await this.resolve(input.templateId);
    if (!snap) throw new ControlPlaneError("not_found", `snapshot '${input.templateId}' not found`);
    return this.holding(snap.build, () =>
      // The snapshot's shape unless the create asks for another; its image has its own size.
      this.o.manager.create({
        ...input,
        cpuCount: input.cpuCount ?? snap.cpuCount,
        memoryMB: input.memoryMB ?? snap.memoryMB,
        templateId: snap.templateId,
        boot: snap.boot ?? { image: snap.templateId },
        diskSizeMB: snap.diskSizeMB,
        fromSnapshot: this.source(snap.build, snap.kind, snap.runtime, snap.sandboxId),
      }),
    );
  }

  /**
   * POST /sandboxes/{id}/fork: one capture, then `count` sandboxes from it,
   * each with its own id and tokens and the parent's metadata and env vars;
   * each succeeds or fails on its own. The capture is not kept.
   */
  async fork(sandboxId: string, opts: { timeout: number; count: number }): Promise<ForkOutcome[]> {
    const { rec, build, kind } = await this.capture(sandboxId, ".fork-");
    try {
      return await this.holding(build, () =>
        Promise.all(
          Array.from({ length: opts.count }, () =>
            this.o.manager
              .create(forkInput(rec, opts.timeout, this.source(build, kind, rec.runtime, rec.id)))
              .then((sandbox): ForkOutcome => ({ sandbox }))
              .catch((error: Error): ForkOutcome => {
                this.o.log.warn({ err: error, sandboxId }, "a fork failed to start");
                return { error };
              }),
          ),
        ),
      );
    } finally {
      this.removeBuild(build);
    }
  }
}

function forkInput(parent: SandboxRecord, timeout: number, fromSnapshot: SnapshotSource): CreateSandboxInput {
  return {
    templateId: parent.templateId,
    boot: parent.boot ?? { image: parent.templateId },
    ...(parent.alias ? { alias: parent.alias } : {}),
    timeout,
    metadata: { ...parent.metadata },
    envVars: { ...parent.envVars },
    allowInternetAccess: parent.allowInternetAccess,
    ...(parent.network !== undefined ? { network: parent.network } : {}),
    cpuCount: parent.cpuCount,
    memoryMB: parent.memoryMB,
    diskSizeMB: parent.diskSizeMB,
    fromSnapshot,
  };
}

/**
 * The kind a request gets: `memory` true asks for memory, false for
 * filesystem-only, absent for the best the instance can take (memory, else
 * filesystem). Never a silent downgrade: asking for what it cannot take, or
 * an instance that can take none, is `invalid`.
 */
function chooseKind(rec: SandboxRecord, inst: Instance, memory: boolean | undefined): SnapshotKind {
  const kinds = inst.snapshotKinds();
  if (kinds.length === 0) {
    throw new ControlPlaneError(
      "invalid",
      `sandbox '${rec.id}' runs on the ${rec.runtime} runtime, which cannot take snapshots here (${findRuntime(rec.runtime)?.snapshotsHint ?? "its runtime takes none"})`,
    );
  }
  const kind: SnapshotKind = memory === false ? "filesystem" : memory === true ? "memory" : kinds.includes("memory") ? "memory" : "filesystem";
  if (!kinds.includes(kind)) {
    throw new ControlPlaneError(
      "invalid",
      `sandbox '${rec.id}' runs on the ${rec.runtime} runtime, which cannot take ${kind} snapshots (it takes: ${kinds.join(", ")}): ask for memory: false (Python SDK: mode="filesystem")`,
    );
  }
  return kind;
}

/** Bytes a directory's files take on disk (sparse images count only what they hold). */
function diskUsage(dir: string): number {
  let total = 0;
  for (const name of readdirSync(dir)) {
    const st = statSync(join(dir, name));
    total += st.isFile() ? st.blocks * 512 : 0;
  }
  return total;
}
