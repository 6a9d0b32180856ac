// Shared set-up for the firecracker runtime suites: a throw-away image cache
// (a template rootfs.ext4 and a kernel file), a logger that keeps its lines,
// instance specs, and a GET /health over the hybrid-vsock socket.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import { pino, type Logger } from "pino";
import type { InstanceSpec } from "../../control-plane/runtimes/runtime.js";
import { cmdline } from "../../control-plane/runtimes/process/procfs.js";
import { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { ENVD_PORT } from "../../envd/version.js";

export const MiB = 1024 * 1024;

export function newId(): string {
  return `f${randomBytes(6).toString("hex")}`;
}

/** A pino logger at debug level whose JSON lines land in `lines`. */
export function capturingLogger(): { log: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { log, lines };
}

/**
 * An image cache under `root` with template `base` (a real 16 MiB ext4 when
 * mkfs.ext4 is there, else zeros) and a placeholder kernel. Returns whether
 * the image is a real ext4.
 */
export function fakeImages(root: string): { imagesDir: string; kernel: string; ext4: boolean } {
  const imagesDir = join(root, "images");
  const tdir = join(imagesDir, "templates", "base-0123456789abcdef");
  mkdirSync(tdir, { recursive: true });
  writeFileSync(join(imagesDir, "templates", "base.current"), "base-0123456789abcdef\n");
  writeFileSync(
    join(tdir, "manifest.json"),
    JSON.stringify({ name: "base", hash: "0123456789abcdef", builtAt: new Date().toISOString(), definition: {}, rootfsBytes: 0, imageBytes: 16 * MiB }),
  );
  const image = join(tdir, "rootfs.ext4");
  let ext4 = false;
  try {
    execFileSync("mkfs.ext4", ["-q", "-F", image, "16M"], { stdio: "ignore", env: { PATH: `${process.env.PATH}:/usr/sbin:/sbin` } });
    ext4 = true;
  } catch {
    writeFileSync(image, Buffer.alloc(16 * MiB));
  }
  const kernel = join(root, "vmlinux");
  writeFileSync(kernel, "not a kernel: the mock Firecracker only checks that it exists\n");
  return { imagesDir, kernel, ext4 };
}

export function instanceSpec(root: string, log: Logger, over: Partial<InstanceSpec> = {}): InstanceSpec {
  const sandboxId = over.sandboxId ?? newId();
  const dir = join(root, "sandboxes", sandboxId);
  mkdirSync(dir, { recursive: true });
  return { sandboxId, templateId: "base", cpuCount: 2, memoryMB: 256, diskSizeMB: 64, dir, allowInternetAccess: false, log, ...over };
}

/** GET /health through a hybrid-vsock agent: envd answers 204. */
export function health(agentOrSocket: http.Agent | string, timeoutMs = 5_000): Promise<number> {
  const agent = typeof agentOrSocket === "string" ? new HybridVsockAgent(agentOrSocket, ENVD_PORT) : agentOrSocket;
  return new Promise((resolve, reject) => {
    const req = http.get({ agent, path: "/health", headers: { host: `${ENVD_PORT}-sbx` }, timeout: timeoutMs }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("timeout", () => req.destroy(new Error("GET /health timed out")));
    req.on("error", reject);
  }).finally(() => {
    if (typeof agentOrSocket === "string") agent.destroy();
  }) as Promise<number>;
}

/** Pids whose command line mentions `needle` (e.g. a test's temp dir). */
export function pidsMentioning(needle: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) continue;
    if (cmdline(pid).some((a) => a.includes(needle))) out.push(pid);
  }
  return out;
}

/** Sets env vars for the tests (undefined: unset) and returns what puts the old values back. */
export function overrideEnv(vars: Record<string, string | undefined>): () => void {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const apply = (v: Record<string, string | undefined>) => {
    for (const [k, value] of Object.entries(v)) {
      if (value === undefined) delete process.env[k];
      else process.env[k] = value;
    }
  };
  apply(vars);
  return () => apply(saved);
}

/** Kills what a suite started and removes its root; the pids of Firecracker processes that were still left (expected: none). */
export async function cleanUpFirecrackerSuite(root: string | undefined, live: { kill(): Promise<void> }[]): Promise<number[]> {
  for (const inst of live) await inst.kill().catch(() => undefined);
  const left = root ? pidsMentioning(root) : [];
  for (const pid of left) process.kill(pid, "SIGKILL");
  if (root) rmSync(root, { recursive: true, force: true });
  return left;
}
