import { existsSync, mkdirSync, readFileSync, rmdirSync } from "node:fs";
import { basename, dirname, join, posix } from "node:path";
import { V1Cgroup, V1Driver } from "./cgroup-v1.js";
import { V2Cgroup, V2Driver } from "./cgroup-v2.js";
import { readText, tryWrite, type CgroupDriver, type CgroupRecord, type SandboxCgroup, type V1Controller } from "./cgroups.js";

const V1_CONTROLLERS: V1Controller[] = ["memory", "cpu", "cpuacct", "pids", "freezer"];
const V2_CONTROLLERS = ["memory", "cpu", "pids"];
/** The folder our sandbox groups live in, under the parent we pick. */
const GROUP_FOLDER = "locale2b";

export interface CgroupMount {
  fstype: "cgroup" | "cgroup2";
  /** The path inside the hierarchy this mount shows (not "/" inside some containers). */
  root: string;
  mountpoint: string;
  superOptions: string[];
}

function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Every cgroup (v1) and cgroup2 mount of this process's mount namespace. */
export function cgroupMounts(): CgroupMount[] {
  const out: CgroupMount[] = [];
  let text = "";
  try {
    text = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return out;
  }
  for (const line of text.split("\n")) {
    const sep = line.indexOf(" - ");
    if (sep < 0) continue;
    const pre = line.slice(0, sep).split(" ");
    const [fstype, , superOpts = ""] = line.slice(sep + 3).split(" ");
    if (fstype !== "cgroup" && fstype !== "cgroup2") continue;
    out.push({ fstype, root: unescapeMount(pre[3] ?? "/"), mountpoint: unescapeMount(pre[4] ?? ""), superOptions: superOpts.split(",") });
  }
  return out;
}

/** Our own group per v1 controller, and in the v2 tree ("" key). */
function ownGroups(): Map<string, string> {
  return processGroups("self");
}

/** A process's group per v1 controller, and in the v2 tree ("" key). */
export function processGroups(pid: number | "self"): Map<string, string> {
  const out = new Map<string, string>();
  let text = "";
  try {
    text = readFileSync(`/proc/${pid}/cgroup`, "utf8");
  } catch {
    return out;
  }
  for (const line of text.split("\n")) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const [, , ctrls, path] = m;
    if (ctrls === "") out.set("", path!);
    else for (const c of ctrls!.split(",")) out.set(c, path!);
  }
  return out;
}

/** Where a group of the hierarchy shows in this mount. */
function inMount(mount: CgroupMount, group: string): string {
  const rel = posix.relative(mount.root, group);
  // A group outside what the mount shows (cgroup namespaces): fall back to the mount's root.
  return rel.startsWith("..") ? mount.mountpoint : join(mount.mountpoint, rel);
}

/** Can we create (and remove) a group under `parent`? Leaves `parent` in place. */
function probeParent(parent: string): boolean {
  try {
    mkdirSync(parent, { recursive: true });
    const probe = join(parent, `probe-${process.pid}-${Date.now()}`);
    mkdirSync(probe);
    rmdirSync(probe);
    return true;
  } catch {
    return false;
  }
}

export interface CgroupDetection {
  driver: CgroupDriver | undefined;
  /** What this host's cgroups cannot do for sandboxes, for check(). */
  notes: string[];
}

function detectV1(mounts: CgroupMount[], own: Map<string, string>): Partial<Record<V1Controller, string>> {
  const parents: Partial<Record<V1Controller, string>> = {};
  for (const ctrl of V1_CONTROLLERS) {
    const mount = mounts.find((m) => m.fstype === "cgroup" && m.superOptions.includes(ctrl));
    if (!mount) continue;
    const parent = join(inMount(mount, own.get(ctrl) ?? "/"), GROUP_FOLDER);
    if (probeParent(parent)) parents[ctrl] = parent;
  }
  return parents;
}

function enabledControllers(dir: string): string[] {
  return (readText(join(dir, "cgroup.subtree_control")) ?? "").split(/\s+/).filter(Boolean);
}

function detectV2(mount: CgroupMount, own: string, root: boolean, override: string | undefined): V2Driver | undefined {
  const ownDir = inMount(mount, own);
  const candidates: string[] = [];
  if (override) candidates.push(override);
  else {
    // The root of the tree is exempt from "no internal processes"; a sibling of our own group
    // (e.g. inside a systemd-delegated slice) can enable controllers; our own group cannot while
    // we are in it, but its children still freeze and die as a unit.
    if (root) candidates.push(join(mount.mountpoint, GROUP_FOLDER));
    if (ownDir !== mount.mountpoint) candidates.push(join(dirname(ownDir), GROUP_FOLDER));
    candidates.push(join(ownDir, GROUP_FOLDER));
  }
  let best: { parent: string; controllers: string[] } | undefined;
  const created: string[] = [];
  for (const parent of [...new Set(candidates)]) {
    const existed = existsSync(parent);
    if (!probeParent(parent)) continue;
    if (!existed) created.push(parent);
    const up = dirname(parent);
    const available = (readText(join(up, "cgroup.controllers")) ?? "").split(/\s+/);
    for (const c of V2_CONTROLLERS) if (available.includes(c)) tryWrite(join(up, "cgroup.subtree_control"), `+${c}`);
    const mine = (readText(join(parent, "cgroup.controllers")) ?? "").split(/\s+/);
    for (const c of V2_CONTROLLERS) if (mine.includes(c)) tryWrite(join(parent, "cgroup.subtree_control"), `+${c}`);
    const controllers = enabledControllers(parent).filter((c) => V2_CONTROLLERS.includes(c));
    if (!best || controllers.length > best.controllers.length) best = { parent, controllers };
    if (controllers.length === V2_CONTROLLERS.length) break;
  }
  for (const dir of created) {
    if (dir === best?.parent) continue;
    try {
      rmdirSync(dir);
    } catch {
      // in use by someone else: leave it
    }
  }
  return best && new V2Driver(best.parent, best.controllers);
}

const LIMIT_NOTES: Record<string, string> = {
  memory: "cgroup memory controller not writable: sandboxes run without a memory limit",
  cpu: "cgroup cpu controller not writable: sandboxes run without a CPU limit",
  pids: "cgroup pids controller not writable: sandboxes run without a process-count limit",
  freezer: "cgroup freezer not writable: pause stops the sandbox's processes with SIGSTOP instead of freezing them",
};

/**
 * Picks how sandboxes get cgroups on this host: v1 controller hierarchies
 * when they are mounted and writable (hybrid hosts such as this project's
 * machines), else the v2 tree (most hosts). Each sandbox group is nested
 * under our own group, so the control plane's own limits still apply.
 */
export function detectCgroups(opts: { root: boolean; override?: string }): CgroupDetection {
  const mounts = cgroupMounts();
  const own = ownGroups();
  const notes: string[] = [];
  const v1Mounted = mounts.some((m) => m.fstype === "cgroup" && V1_CONTROLLERS.some((c) => m.superOptions.includes(c)));
  const v1 = opts.override ? {} : detectV1(mounts, own);
  if (Object.keys(v1).length > 0) {
    for (const c of ["memory", "cpu", "pids", "freezer"] as const) if (!v1[c]) notes.push(LIMIT_NOTES[c]!);
    if (!v1.cpuacct) notes.push("cgroup cpuacct controller not writable: CPU usage in stats comes from /proc");
    return { driver: new V1Driver(v1), notes };
  }
  const v2mount = mounts.find((m) => m.fstype === "cgroup2");
  const v2 = v2mount ? detectV2(v2mount, own.get("") ?? "/", opts.root, opts.override) : undefined;
  if (v2) {
    for (const c of V2_CONTROLLERS) if (!v2.controllers.includes(c)) notes.push(`${LIMIT_NOTES[c]!} (not delegated to ${v2.parent})`);
    if (v1Mounted) notes.push("cgroup v1 controllers are mounted but not writable for this user: using the cgroup v2 tree");
    return { driver: v2, notes };
  }
  const why = opts.override
    ? `LOCALE2B_CGROUP_PARENT=${opts.override} is not a writable cgroup v2 directory`
    : opts.root
      ? "no cgroup v1 or v2 hierarchy is mounted writable"
      : "this user may not create cgroups (run as root, or under a delegated cgroup v2 subtree, e.g. `systemd-run --user --scope -p Delegate=yes`, or set LOCALE2B_CGROUP_PARENT)";
  notes.push(
    `no cgroups for sandboxes: ${why}; sandboxes run without memory, CPU and process-count limits, pause stops their processes with SIGSTOP, and stats come from /proc`,
  );
  return { driver: undefined, notes };
}

/**
 * Re-opens a sandbox group from its persisted record; undefined when it is
 * gone, or when its directories are not named after `name` (a record that
 * is not this sandbox's must never lead to killing another group).
 */
export function openCgroup(record: unknown, name: string): SandboxCgroup | undefined {
  const rec = record as CgroupRecord | undefined | null;
  if (!rec || typeof rec !== "object") return undefined;
  const dirs = rec.kind === "v1" ? Object.values(rec.dirs ?? {}) : [rec.dir];
  if (dirs.length === 0 || !dirs.every((d) => typeof d === "string" && basename(d) === name)) return undefined;
  const group =
    rec.kind === "v1" && rec.dirs && typeof rec.dirs === "object"
      ? new V1Cgroup(rec.dirs)
      : rec.kind === "v2" && typeof rec.dir === "string"
        ? new V2Cgroup(rec.dir)
        : undefined;
  return group?.exists() ? group : undefined;
}

/**
 * The record of the group a process is in (e.g. one runsc made for a gVisor
 * sandbox), for openCgroup(): v1 when v1 controllers are mounted, else the
 * v2 tree; undefined when the group is not named `name`.
 */
export function groupRecordOf(pid: number, name: string): CgroupRecord | undefined {
  const mounts = cgroupMounts();
  const groups = processGroups(pid);
  const dirs: Partial<Record<V1Controller, string>> = {};
  for (const ctrl of V1_CONTROLLERS) {
    const mount = mounts.find((m) => m.fstype === "cgroup" && m.superOptions.includes(ctrl));
    const group = groups.get(ctrl);
    if (mount && group && basename(group) === name) dirs[ctrl] = inMount(mount, group);
  }
  if (Object.keys(dirs).length) return { kind: "v1", dirs };
  const v2 = mounts.find((m) => m.fstype === "cgroup2");
  const group = groups.get("");
  return v2 && group && basename(group) === name ? { kind: "v2", dir: inMount(v2, group) } : undefined;
}
