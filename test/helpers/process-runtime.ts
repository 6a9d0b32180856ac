// The fixture the process runtime suites (test/control-plane/process-runtime-*.test.ts)
// share: one runtime, agent pool and data dir per test file, and sandboxes
// wrapped the way the manager uses them. Call useProcessRuntime() once at the
// top of a file that creates sandboxes.
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { afterAll, beforeAll, expect } from "vitest";
import { ProcessInstance } from "../../control-plane/runtimes/process/instance.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { cmdline } from "../../control-plane/runtimes/process/procfs.js";
import { EnvdClient } from "../../control-plane/transport/envd-client.js";
import type { Endpoint } from "../../control-plane/transport/endpoint.js";
import { Transport } from "../../control-plane/transport/transport.js";
import { Process } from "../../gen/ts/process/process_pb.js";
import { run } from "./process.js";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
export const isRoot = process.getuid?.() === 0;
export const log = pino({ level: "silent" });
export const MiB = 1024 * 1024;

/** The runtimes start envd from dist/: build it when it is missing or older than the sources. */
function ensureBuilt(): void {
  const entry = join(ROOT, "dist", "control-plane", "cli", "main.js");
  const newest = (dir: string): number => {
    let max = 0;
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) max = Math.max(max, newest(p));
      else if (e.name.endsWith(".ts")) max = Math.max(max, statSync(p).mtimeMs);
    }
    return max;
  };
  const built = existsSync(entry) ? statSync(entry).mtimeMs : 0;
  const sources = Math.max(...["envd", "control-plane", join("gen", "ts")].map((d) => newest(join(ROOT, d))));
  if (built > sources) return;
  try {
    execFileSync(join(ROOT, "node_modules", ".bin", "tsc"), ["-p", "tsconfig.build.json"], { cwd: ROOT, stdio: "pipe" });
  } catch (err) {
    // Type errors elsewhere still emit JavaScript; only a missing entry point is fatal.
    if (!existsSync(entry)) throw err;
  }
}

export interface Sandbox {
  id: string;
  dir: string;
  inst: ProcessInstance;
  /** How the test reaches its envd (as the manager would). */
  endpoint: Endpoint;
  client: Client<typeof Process>;
  token: string;
  /** Runs `sh -c command` (as `user` unless `as` says otherwise) and returns trimmed stdout. */
  sh(command: string, as?: string): Promise<string>;
  exit(command: string, as?: string): Promise<{ code: number; stdout: string; stderr: string }>;
}

export const transport = new Transport();
export const envd = new EnvdClient();
export let dataDir = "";
export const runtime = new ProcessRuntime();
const live: Sandbox[] = [];

export function newId(): string {
  return `t${randomBytes(6).toString("hex")}`;
}

function headersFor(token: string, as?: string): Record<string, string> {
  return {
    "x-access-token": token,
    ...(as ? { authorization: `Basic ${Buffer.from(`${as}:`).toString("base64")}` } : {}),
  };
}

/** Wraps an instance the way the manager uses it: wait for /health, POST /init, then Connect clients. */
export async function attach(id: string, dir: string, inst: ProcessInstance, init = true): Promise<Sandbox> {
  const endpoint = transport.local(id, inst.socketPath);
  await envd.waitReady(endpoint, 30_000, () => inst.alive());
  const token = `tok-${id}`;
  if (init) {
    const res = await envd.request(endpoint, {
      method: "POST",
      path: "/init",
      body: { accessToken: token, defaultUser: inst.defaultUser, defaultWorkdir: inst.defaultWorkdir },
    });
    expect(res.status).toBe(204);
  }
  const agent = endpoint.agent();
  const client = createClient(Process, createConnectTransport({ baseUrl: "http://envd", httpVersion: "1.1", nodeOptions: { agent } }));
  const exit = async (command: string, as?: string) => {
    const r = await run(client, command, {}, headersFor(token, as));
    return { code: r.end?.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  const sbx: Sandbox = {
    id,
    dir,
    inst,
    endpoint,
    client,
    token,
    exit,
    async sh(command, as) {
      const r = await exit(command, as);
      if (r.code !== 0) throw new Error(`'${command}' exited ${r.code}: ${r.stderr}`);
      return r.stdout.trim();
    },
  };
  live.push(sbx);
  return sbx;
}

export async function create(opts: { allowInternetAccess?: boolean; memoryMB?: number; cpuCount?: number; data?: string; background?: boolean } = {}): Promise<Sandbox> {
  const id = newId();
  const dir = join(opts.data ?? dataDir, "sandboxes", id);
  mkdirSync(dir, { recursive: true });
  const inst = await runtime.create({
    sandboxId: id,
    templateId: "base",
    cpuCount: opts.cpuCount ?? 1,
    memoryMB: opts.memoryMB ?? 256,
    diskSizeMB: 1024,
    dir,
    allowInternetAccess: opts.allowInternetAccess ?? true,
    ...(opts.background ? { background: true } : {}),
    log,
  });
  return attach(id, dir, inst);
}

/** envd's host pid: the node process in the sandbox serving its socket. */
export function envdPid(s: Sandbox): number {
  const isEnvd = (args: string[]) => args.includes(`unix+vsock://${s.inst.socketPath}`) || args.includes("/opt/locale2b/envd/envd.js");
  const pid = s.inst.pids().find((p) => p !== s.inst.pid && isEnvd(cmdline(p)) && cmdline(p)[0]?.endsWith("node"));
  if (!pid) throw new Error("envd's process not found");
  return pid;
}

export function cgroupFile(s: Sandbox, v1: [string, string], v2: string): string | undefined {
  const rec = s.inst.cgroup?.record;
  if (!rec) return undefined;
  if (rec.kind === "v1") {
    const dir = rec.dirs[v1[0] as keyof typeof rec.dirs];
    return dir && readFileSync(join(dir, v1[1]), "utf8").trim();
  }
  return readFileSync(join(rec.dir, v2), "utf8").trim();
}

export { sleep } from "./wait.js";

/**
 * Registers the file's hooks: as root, builds dist/ if stale and makes the data
 * dir before its tests, and afterwards kills every sandbox still alive and
 * removes the data dir. When not root, says why its root-only suites skip.
 * `fileUrl` is the test file's import.meta.url, for that message.
 */
export function useProcessRuntime(fileUrl: string): void {
  if (!isRoot) {
    // eslint-disable-next-line no-console
    console.warn(`${basename(fileURLToPath(fileUrl))}: skipping the process runtime suites: they need root (run the tests as root)`);
  }

  beforeAll(() => {
    if (!isRoot) return;
    ensureBuilt();
    // Not under /tmp or /home: those are the sandbox's own inside, and these tests check the host's /tmp.
    dataDir = mkdtempSync("/var/tmp/locale2b-prt-");
  });

  afterAll(async () => {
    for (const s of live) await s.inst.kill().catch(() => undefined);
    transport.destroy();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });
}
