// The cgroups a test node's kubelet puts its pods under (its `cgroupRoot`), on cgroup v1 (these machines:
// one hierarchy per controller) or v2. Created before the kubelet starts (it refuses a missing root),
// emptied and removed by `down`.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Mount points of every cgroup hierarchy (v1 controllers, the v2 unified tree). */
export function cgroupHierarchies(): string[] {
  return readFileSync("/proc/self/mounts", "utf8")
    .split("\n")
    .map((l) => l.split(" "))
    .filter((f) => f[2] === "cgroup" || f[2] === "cgroup2")
    .map((f) => f[1]!);
}

/** True where /sys/fs/cgroup is the v2 unified tree (most hosts); false on v1 or hybrid (these machines). */
export function cgroupV2(): boolean {
  return existsSync("/sys/fs/cgroup/cgroup.controllers");
}

/** Creates `path` (e.g. /locale2b-k8s-x/node1) in every hierarchy. */
export function createCgroup(path: string): void {
  for (const h of cgroupHierarchies()) {
    let dir = h;
    for (const part of path.split("/").filter(Boolean)) {
      const parent = dir;
      dir = join(dir, part);
      if (existsSync(dir)) continue;
      mkdirSync(dir);
      // cpuset (v1): a new group starts with no CPUs and no memory nodes; nothing can join it until set.
      if (existsSync(join(dir, "cpuset.cpus")) && !existsSync(join(dir, "cgroup.controllers"))) {
        for (const f of ["cpuset.cpus", "cpuset.mems"]) writeFileSync(join(dir, f), readFileSync(join(parent, f), "utf8").trim() || "\n");
      }
      // v2: let the children use the controllers the parent has.
      if (existsSync(join(parent, "cgroup.subtree_control")) && existsSync(join(dir, "cgroup.controllers"))) {
        const controllers = readFileSync(join(dir, "cgroup.controllers"), "utf8").trim().split(/\s+/).filter(Boolean);
        if (controllers.length) {
          try {
            writeFileSync(join(dir, "cgroup.subtree_control"), controllers.map((c) => `+${c}`).join(" "));
          } catch {
            // a controller the tree cannot delegate: the kubelet says which if it matters
          }
        }
      }
    }
  }
}

/** Every pid in `path`'s subtree, in every hierarchy. */
export function cgroupPids(path: string): number[] {
  const pids = new Set<number>();
  const walk = (dir: string) => {
    try {
      for (const l of readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n")) if (l) pids.add(Number(l));
      for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(join(dir, e.name));
    } catch {
      // removed meanwhile
    }
  };
  for (const h of cgroupHierarchies()) walk(join(h, path));
  return [...pids];
}

/** Removes `path`'s subtree (deepest first) from every hierarchy; returns the directories still there. */
export function removeCgroup(path: string): string[] {
  const left: string[] = [];
  const rm = (dir: string) => {
    if (!existsSync(dir)) return;
    try {
      for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) rm(join(dir, e.name));
      rmdirSync(dir);
    } catch {
      left.push(dir);
    }
  };
  for (const h of cgroupHierarchies()) rm(join(h, path));
  return left;
}

/** The directories of `path` that exist in any hierarchy. */
export function cgroupLeft(path: string): string[] {
  return cgroupHierarchies()
    .map((h) => join(h, path))
    .filter((d) => existsSync(d));
}
