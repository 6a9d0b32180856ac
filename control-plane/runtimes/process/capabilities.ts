import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { dirname, join } from "node:path";
import { findExecutable } from "../../host/executables.js";
import { packageRoot } from "../paths.js";
import { detectCgroups } from "./cgroup-detect.js";
import type { CgroupDriver } from "./cgroups.js";
import { buildLaunch, pathsToKeep, type IsolationMode } from "./namespaces.js";
import { vethUnsupported } from "../net/veth.js";
import { prepareSandboxFs, sandboxLayout, userFiles } from "./sandbox-fs.js";

/** What this host lets the process runtime do, probed once. */
export interface HostCapabilities {
  root: boolean;
  mode: IsolationMode;
  bin: { unshare?: string; mount?: string; ip?: string };
  /** userns mode: envd runs as `user` (our uid mapped) rather than as root of the namespace. */
  userMapping: boolean;
  /** userns mode: offline sandboxes (allowInternetAccess false) get their own network namespace. */
  netns: boolean;
  /** sandbox mode: why sandboxes cannot get a veth with rules (then they have only `lo`), if so. */
  noVeth?: string;
  /** sandbox mode: what the host lacks to start sandboxes at all (creates fail saying so). */
  missing?: string;
  readOnlyRoot: boolean;
  cgroups: CgroupDriver | undefined;
  /** Human-readable: every isolation feature this host lacks, and what happens instead. */
  notes: string[];
}

export interface ProbeOptions {
  /** Try to make the host filesystem read-only inside sandboxes. */
  readOnlyRoot: boolean;
  /** A cgroup v2 directory to create sandbox groups in, instead of detecting one. */
  cgroupParent?: string;
  /** Skip the namespace probes and use this mode (tests). */
  forceMode?: IsolationMode;
  /** sandbox mode: why veths cannot be given (default: vethUnsupported()). */
  vethUnsupported?: () => string | undefined;
}

const SEARCH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];


function run(file: string, args: string[]): Promise<{ ok: boolean; output: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 10_000, env: { PATH: SEARCH.join(":") } }, (err, stdout, stderr) => {
      const output = `${stderr}${stdout}`.trim().split("\n").slice(-3).join(" / ");
      resolve({ ok: !err, output: output || (err ? err.message : "") });
    });
  });
}

/** Host paths envd needs at run time: the node binary's folder and the locale2b package. */
let runtimePathsCache: string[] | undefined;

export function runtimePaths(): string[] {
  if (runtimePathsCache) return runtimePathsCache;
  const out: string[] = [];
  try {
    out.push(dirname(realpathSync(process.execPath)));
  } catch {
    out.push(dirname(process.execPath));
  }
  out.push(packageRoot());
  runtimePathsCache = out;
  return out;
}

/**
 * Starts one throw-away sandbox set-up exactly as create() would (same
 * unshare flags, same fstab, same script) with /bin/true in place of envd.
 */
async function probeMode(
  mode: "userns",
  bin: { unshare: string; mount: string },
  readOnlyRoot: boolean,
  userMapping: boolean,
): Promise<{ ok: boolean; output: string }> {
  const base = mkdtempSync(join(tmpdir(), "locale2b-probe-"));
  try {
    const layout = sandboxLayout(join(base, "sandboxes", "probe"));
    const files = userFiles();
    prepareSandboxFs(layout, files, undefined);
    const launch = buildLaunch({
      mode,
      sandboxId: "probe",
      layout,
      bin,
      isolateNet: false,
      readOnlyRoot,
      innerUser: mode === "userns" && userMapping ? files.user : undefined,
      cgroupProcs: [],
      keep: pathsToKeep(layout, runtimePaths()),
      command: ["/bin/sh", "-c", "test -d /home/user && test -w /tmp"],
    });
    writeFileSync(layout.fstab, launch.fstab);
    return await run(launch.file, launch.args);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

/** What sandbox mode needs from the kernel and the host's tools, as one reason; undefined when all is there. */
export function sandboxModeMissing(): string | undefined {
  const missing: string[] = [];
  let filesystems = "";
  try {
    filesystems = readFileSync("/proc/filesystems", "utf8");
  } catch {
    // unreadable: assume nothing
  }
  if (!/\boverlay\b/.test(filesystems)) missing.push("the overlay filesystem (modprobe overlay)");
  if (!/\bext4\b/.test(filesystems)) missing.push("the ext4 filesystem (modprobe ext4)");
  if (!existsSync("/dev/loop-control")) missing.push("loop devices (/dev/loop-control; modprobe loop)");
  if (!findExecutable("mkfs.ext4")) missing.push("mkfs.ext4 (apt-get install e2fsprogs)");
  if (!findExecutable("cp")) missing.push("cp (coreutils)");
  return missing.length ? `this host lacks ${missing.join(", ")}` : undefined;
}

export async function probeHost(opts: ProbeOptions): Promise<HostCapabilities> {
  const root = process.getuid?.() === 0;
  const notes: string[] = [];
  const bin = { unshare: findExecutable("unshare"), mount: findExecutable("mount"), ip: findExecutable("ip") };
  const cg = detectCgroups({ root, override: opts.cgroupParent });
  const caps: HostCapabilities = {
    root,
    mode: "none",
    bin,
    userMapping: false,
    netns: false,
    readOnlyRoot: false,
    cgroups: cg.driver,
    notes,
  };
  const me = (() => {
    try {
      return `${userInfo().username} (uid ${process.getuid?.()})`;
    } catch {
      return `uid ${process.getuid?.()}`;
    }
  })();

  if ((root && !opts.forceMode) || opts.forceMode === "sandbox") {
    caps.mode = "sandbox";
    caps.missing = sandboxModeMissing();
    if (caps.missing) notes.push(`sandboxes cannot start: ${caps.missing}`);
    caps.noVeth = (opts.vethUnsupported ?? vethUnsupported)();
    if (caps.noVeth) notes.push(`sandboxes get no network but loopback (no internet access, no egress rules): ${caps.noVeth}`);
    if (!cg.driver) notes.push("no writable cgroups: sandboxes run without memory, CPU and process-count limits");
    notes.push(...cg.notes);
    return caps;
  }
  if (opts.forceMode) {
    caps.mode = opts.forceMode;
    caps.readOnlyRoot = opts.forceMode !== "none" && opts.readOnlyRoot;
    caps.userMapping = opts.forceMode === "userns";
  } else if (!bin.unshare || !bin.mount) {
    notes.push(
      `util-linux ${!bin.unshare ? "unshare" : "mount"} not found: sandboxes run WITHOUT isolation (envd runs as ${me} directly on the host, seeing its files, processes and network)`,
    );
  } else {
    const b = { unshare: bin.unshare, mount: bin.mount };
    const failures: string[] = [];
    // Most isolated first; each step down says what is lost.
    const attempts: { mode: "userns"; ro: boolean; mapping: boolean }[] = [];
    const ros = opts.readOnlyRoot ? [true, false] : [false];
    for (const mapping of [true, false]) for (const ro of ros) attempts.push({ mode: "userns", ro, mapping });
    for (const a of attempts) {
      const r = await probeMode(a.mode, b, a.ro, a.mapping);
      if (r.ok) {
        caps.mode = a.mode;
        caps.readOnlyRoot = a.ro;
        caps.userMapping = a.mapping;
        break;
      }
      failures.push(`${a.mode}${a.ro ? "+ro" : ""}${a.mapping ? "+user" : ""}: ${r.output}`);
    }
    if (caps.mode === "none") {
      notes.push(
        `namespaces unavailable (${failures.at(-1) ?? "unshare failed"}): sandboxes run WITHOUT isolation (envd runs as ${me} directly on the host, seeing its files, processes and network)`,
      );
    } else {
      if (caps.mode === "userns") {
        notes.push(
          caps.userMapping
            ? `not running as root: sandboxes live in user namespaces and their processes all run as \`user\`, which is ${me} on the host; requests to run as other users (e.g. root) are refused`
            : `not running as root and this unshare cannot map a second user: sandbox processes run as root inside a user namespace, which is ${me} on the host (\`whoami\` prints root)`,
        );
      }
      if (opts.readOnlyRoot && !caps.readOnlyRoot) {
        notes.push("cannot remount the host filesystem read-only inside sandboxes: a sandbox's root can write to the host's files");
      }
    }
  }

  if (caps.mode !== "none" && bin.unshare && !opts.forceMode) {
    const flags = ["--user", "--map-root-user", "--net"];
    const r = await run(bin.unshare, [...flags, "/bin/true"]);
    caps.netns = r.ok;
    if (!r.ok) notes.push(`network namespaces unavailable (${r.output}): sandboxes created without internet access still share the host's network`);
    else if (!bin.ip) notes.push("iproute2 `ip` not found: sandboxes without internet access have no loopback interface either");
  } else if (opts.forceMode && opts.forceMode !== "none") {
    caps.netns = true;
  }
  notes.push(...cg.notes);
  return caps;
}
