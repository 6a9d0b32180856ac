import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import type { PersistedQemuInstance } from "../../control-plane/runtimes/qemu/instance.js";
import type { Runtime } from "../../control-plane/runtimes/runtime.js";
import { startControlPlane, type RunningControlPlane } from "../../control-plane/server.js";
import type { LocalEndpoint } from "../../control-plane/transport/local-endpoint.js";
import { onCleanup } from "../lib/cleanup.js";
import { ENVD_PORT, killSandboxesSync, request, type SandboxHandle } from "../lib/control-plane.js";
import { processTable, sandboxPids } from "../lib/procmem.js";

/**
 * Helpers shared by the parts of `npm run bench -- vm` (bench/vm/): a real
 * control plane started in this process with a given runtime (qemu, or the
 * process runtime on the template's rootfs), sandboxes made through its REST
 * API, and host-side CPU and memory of a sandbox's processes.
 */

export const MiB = 1024 * 1024;

export interface InProcessControlPlane {
  url: string;
  dataDir: string;
  cp: RunningControlPlane;
  /** Sandboxes created and not yet deleted through this handle. */
  readonly live: Set<string>;
  /** POST /v2/sandboxes (template base), as the SDK does; returns when envd answered /health and /init. */
  createSandbox(): Promise<SandboxHandle>;
  deleteSandbox(id: string): Promise<void>;
  /** Deletes every sandbox, closes the server, kills anything left, removes the data dir. */
  stop(): Promise<void>;
}

/**
 * `startControlPlane` (control-plane/server.ts) in this process, with
 * `runtime`, on a free port, a fresh data dir under os.tmpdir() and a random
 * API key; logs at LOCALE2B_LOG_LEVEL (default warn) on stderr. Sandboxes
 * (VMs and their vhost-device-vsock daemons are detached) are killed however
 * the benchmark ends: by the API on stop(), and on an error or Ctrl-C by
 * every process whose command line names the data dir (QEMU's and the
 * daemon's do) and by cgroup.
 */
export async function startInProcessControlPlane(runtime: Runtime): Promise<InProcessControlPlane> {
  const dataDir = mkdtempSync(join(tmpdir(), `locale2b-bench-${runtime.name}-`));
  const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
  const live = new Set<string>();
  const forget = onCleanup(() => {
    killSandboxesSync(dataDir, live);
    rmSync(dataDir, { recursive: true, force: true });
  });
  let cp: RunningControlPlane;
  try {
    cp = await startControlPlane({
      host: "127.0.0.1",
      port: 0,
      dataDir,
      apiKey,
      runtime,
      // The benchmark, not the server's defaults, decides how many sandboxes exist.
      limits: { maxSandboxes: 1000, memoryBudgetMB: 1024 * 1024 * 1024 },
      log: pino({ level: process.env.LOCALE2B_LOG_LEVEL ?? "warn", base: { component: `bench-${runtime.name}` } }, pino.destination(2)),
    });
  } catch (err) {
    killSandboxesSync(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
    forget();
    throw err;
  }
  const url = cp.url;
  const auth = { "X-API-Key": apiKey };
  const h: InProcessControlPlane = {
    url,
    dataDir,
    cp,
    live,
    async createSandbox() {
      const res = await request(`${url}/v2/sandboxes`, "POST", auth, { templateID: "base", timeout: 3600 });
      if (res.status !== 201) throw new Error(`POST /v2/sandboxes answered ${res.status}: ${res.body.slice(0, 500)}`);
      const body = JSON.parse(res.body) as { sandboxID: string; envdAccessToken: string };
      live.add(body.sandboxID);
      // The benchmark dials envd's socket itself (a direct baseline beside the proxy): this server's endpoints are local.
      const { socketPath } = (await cp.manager.endpoint(body.sandboxID)).endpoint as LocalEndpoint;
      return {
        id: body.sandboxID,
        token: body.envdAccessToken,
        dir: join(dataDir, "sandboxes", body.sandboxID),
        socketPath,
        proxyHeaders: { "E2b-Sandbox-Id": body.sandboxID, "E2b-Sandbox-Port": String(ENVD_PORT), "X-Access-Token": body.envdAccessToken },
      };
    },
    async deleteSandbox(id) {
      const res = await request(`${url}/sandboxes/${id}`, "DELETE", auth);
      if (res.status !== 204 && res.status !== 404) throw new Error(`DELETE /sandboxes/${id} answered ${res.status}: ${res.body.slice(0, 300)}`);
      live.delete(id);
    },
    async stop() {
      try {
        for (const id of [...live]) await h.deleteSandbox(id).catch(() => undefined);
        await cp.close().catch(() => undefined);
        const leftovers = killSandboxesSync(dataDir, live);
        if (leftovers) console.log(`  warning: ${leftovers} sandbox process(es) were still running after the server stopped; killed`);
        rmSync(dataDir, { recursive: true, force: true });
      } finally {
        forget();
      }
    },
  };
  return h;
}

/** QEMU's and vhost-device-vsock's pids, from what the store keeps for a qemu sandbox (PersistedQemuInstance). */
export function vmPids(h: InProcessControlPlane, id: string): { qemu: number; vhost: number } {
  const data = h.cp.manager.get(id).runtimeData as Partial<PersistedQemuInstance> | undefined;
  if (!data?.qemu || !data.vhost) throw new Error(`sandbox ${id} has no QEMU pids in the store (runtime ${h.cp.runtime.name})`);
  return { qemu: data.qemu.pid, vhost: data.vhost.pid };
}

/**
 * The host processes that make up a sandbox: QEMU and vhost-device-vsock
 * for a VM; the processes of its cgroup (else those naming its directory)
 * for the process runtime: its init and envd.
 */
export function sandboxHostPids(h: InProcessControlPlane, sb: SandboxHandle): number[] {
  if (h.cp.runtime.name === "qemu") {
    const p = vmPids(h, sb.id);
    return [p.qemu, p.vhost];
  }
  return [...sandboxPids(sb.id, sb.dir, processTable()).pids];
}

/** USER_HZ: clock ticks per second of /proc/<pid>/stat times. */
const USER_HZ = 100;

/**
 * CPU seconds (user + system) used so far by `pids`, each with its children
 * already waited for (cutime, cstime): envd reaps the commands it runs, so
 * for the process runtime they count, as they do inside a VM's QEMU.
 * Processes gone meanwhile count 0.
 */
export function cpuSecondsWithChildren(pids: readonly number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    } catch {
      // gone
    }
  }
  return ticks / USER_HZ;
}

/** /proc/<pid>/status memory fields in bytes (VmRSS, RssAnon, RssFile, RssShmem); undefined when the process is gone. */
export function procStatusMemory(pid: number): { rss: number; anon: number; file: number; shmem: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return undefined;
  }
  const kb = (field: string) => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text);
    return m ? Number(m[1]) * 1024 : 0;
  };
  return { rss: kb("VmRSS"), anon: kb("RssAnon"), file: kb("RssFile"), shmem: kb("RssShmem") };
}

/** One sandbox of one runtime, for the side-by-side parts (exec, stream). */
export interface RuntimeSide {
  /** Row label, e.g. "qemu VM (TCG), hybrid vsock via vhost-device-vsock". */
  label: string;
  h: InProcessControlPlane;
  sb: SandboxHandle;
  /** Its host processes (see sandboxHostPids), as they were once envd answered. */
  pids: number[];
}

/**
 * A qemu VM and a process-runtime sandbox on the same template's root
 * filesystem (`templateRootfs: true`: the same userland, init, Node and
 * envd), each from its own in-process control plane.
 */
export async function startPair(vm: Runtime, proc: Runtime, accel: string): Promise<{ vm: RuntimeSide; proc: RuntimeSide; stop(): Promise<void> }> {
  const started: InProcessControlPlane[] = [];
  const stop = async () => {
    for (const h of started.splice(0)) await h.stop();
  };
  try {
    const side = async (r: Runtime, label: string): Promise<RuntimeSide> => {
      const h = await startInProcessControlPlane(r);
      started.push(h);
      const sb = await h.createSandbox();
      return { label, h, sb, pids: sandboxHostPids(h, sb) };
    };
    const procSide = await side(proc, "process runtime (template rootfs), Unix socket");
    const vmSide = await side(vm, `qemu VM (${accel}), hybrid vsock via vhost-device-vsock`);
    return { vm: vmSide, proc: procSide, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
