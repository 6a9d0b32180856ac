// Runs the guest init (rootfs/init, built by ensureInitBinary) as an
// ordinary process in process mode, with this repo's envd behind it, and
// reads /proc around it. Used by test/rootfs/init.test.ts.
import http from "node:http";
import net from "node:net";
import { dialHybridVsock, FORWARD_PORT } from "../../control-plane/transport/hybrid-vsock.js";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { cliEntry } from "../../control-plane/runtimes/paths.js";
import { requireHostEnvdTag, SELF } from "./accounts.js";

export const hasGcc = spawnSync(process.env.CC || "gcc", ["--version"], { stdio: "ignore" }).status === 0;

export interface RunningInit {
  child: ChildProcess;
  pid: number;
  /** Everything the init (and envd) wrote to stderr and stdout so far. */
  log(): string;
  waitForLog(re: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Resolves with (code, signal) once the init exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts `file args…` (the init, or a wrapper that runs it), collecting its output. */
export function startInit(file: string, args: string[]): RunningInit {
  const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    pid: child.pid!,
    log: () => out,
    exited,
    async waitForLog(re, timeoutMs = 20_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const m = out.match(re);
        if (m) return m;
        if (Date.now() > until) throw new Error(`no ${re} in the init's output within ${timeoutMs} ms:\n${out}`);
        await sleep(20);
      }
    },
  };
}

/** Process mode with this repo's envd (`node dist/control-plane/cli/main.js envd`) behind the bridge. */
export function startInitWithEnvd(binary: string, dir: string, extra: string[] = []): RunningInit {
  requireHostEnvdTag();
  const envdSocket = join(dir, "envd.sock");
  // As the tests' own user, whatever accounts the host has (test/helpers/accounts.ts).
  const envd = [cliEntry(), "envd", "--listen", `unix://${envdSocket}`, "--user", SELF.name];
  return startInit(binary, [
    "--no-mounts",
    "--hybrid-listen",
    join(dir, "host.sock"),
    "--envd-socket",
    envdSocket,
    "--envd-cmd",
    process.execPath,
    ...envd.flatMap((a) => ["--envd-arg", a]),
    ...extra,
  ]);
}

export interface ProcInfo {
  pid: number;
  comm: string;
  state: string;
  ppid: number;
}

export function procInfo(pid: number): ProcInfo | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const close = stat.lastIndexOf(")");
    const [state, ppid] = stat.slice(close + 2).split(" ");
    return { pid, comm: stat.slice(stat.indexOf("(") + 1, close), state: state!, ppid: Number(ppid) };
  } catch {
    return undefined; // gone
  }
}

/** Every process whose parent is `pid` (zombies included). */
export function childrenOf(pid: number): ProcInfo[] {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .map((d) => procInfo(Number(d)))
    .filter((p): p is ProcInfo => p?.ppid === pid);
}

/** VmRSS / VmHWM of a process in KiB. */
export function memoryKiB(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
  return { rss: kib("VmRSS"), hwm: kib("VmHWM") };
}

/** User + system CPU time of a process, in clock ticks. */
export function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15 of stat)
}

export function fdCount(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

export function which(cmd: string): string | undefined {
  for (const dir of (process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin").split(":")) {
    const p = join(dir, cmd);
    if (existsSync(p)) return p;
  }
  return undefined;
}

// Raw clients of the init's hybrid-vsock socket, shared by test/rootfs/init*.test.ts.
export interface Res {
  status: number;
  body: Buffer;
}

export function request(agent: http.Agent, method: string, path: string, body?: Buffer, onResponse?: (res: http.IncomingMessage) => void): Promise<Res> {
  return new Promise((resolve, reject) => {
    const headers = body ? { "content-type": "application/octet-stream", "content-length": String(body.length) } : {};
    const req = http.request({ host: "envd", path, method, agent, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks) }));
      res.on("error", reject);
      onResponse?.(res);
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** Writes `bytes` on a fresh connection to the hybrid socket and returns what came back before it closed. */
export function rawExchange(socketPath: string, bytes: string): Promise<{ data: string; error?: string }> {
  return import("node:net").then(
    ({ default: netMod }) =>
      new Promise((resolve) => {
        const s = netMod.createConnection(socketPath, () => s.write(bytes));
        let data = "";
        let error: string | undefined;
        s.on("data", (c: Buffer) => (data += c.toString("latin1")));
        s.on("error", (e: NodeJS.ErrnoException) => (error = e.code));
        s.on("close", () => resolve({ data, error }));
      }),
  );
}

/** Reads one `\n`-terminated line from `s`, leaving what follows it in the stream. */
export function readLine(s: net.Socket): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const done = (err?: Error, line?: string) => {
      s.off("data", onData);
      s.off("close", onClose);
      if (err) reject(err);
      else resolve(line!);
    };
    const onClose = () => done(new Error(`closed before a line; got '${buffered.toString("latin1")}'`));
    const onData = (c: Buffer) => {
      buffered = Buffer.concat([buffered, c]);
      const nl = buffered.indexOf(10);
      if (nl < 0) return;
      s.pause();
      if (nl + 1 < buffered.length) s.unshift(buffered.subarray(nl + 1));
      done(undefined, buffered.subarray(0, nl).toString("latin1"));
    };
    s.on("data", onData);
    s.once("close", onClose);
  });
}

/** Through the init's forwarder (`CONNECT 49982`, then `TCP <port>`) to 127.0.0.1:port; resolves (paused) once `OK` came. */
export async function dialForward(socketPath: string, port: number): Promise<net.Socket> {
  const s = await dialHybridVsock(socketPath, FORWARD_PORT);
  s.write(`TCP ${port}\n`);
  const line = await readLine(s);
  if (line !== "OK") {
    s.destroy();
    throw new Error(`forwarder answered '${line}'`);
  }
  return s;
}

/** A TCP server on 127.0.0.1 that calls `onConn` for each connection; resolves with it listening. */
export async function tcpServer(onConn: (s: net.Socket) => void): Promise<{ server: net.Server; port: number }> {
  const server = net.createServer({ allowHalfOpen: true }, onConn);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as net.AddressInfo).port };
}

export function readAll(s: net.Socket): Promise<string> {
  return new Promise((resolve, reject) => {
    let data = "";
    s.on("data", (c: Buffer) => (data += c.toString("latin1")));
    s.on("end", () => resolve(data));
    s.on("error", reject);
    s.resume(); // dialForward leaves it paused
  });
}

/**
 * Ends a test's init and what it started: SIGTERM (the init stops envd and
 * its other children, then exits), then SIGKILL for anything left, the init's
 * children included, so no envd outlives the test.
 */
export async function stopInit(init: RunningInit | undefined): Promise<void> {
  if (!init || init.child.exitCode !== null || init.child.signalCode !== null) return;
  const children = childrenOf(init.pid).map((p) => p.pid);
  init.child.kill("SIGTERM");
  const done = await Promise.race([init.exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 5_000))]);
  if (!done) init.child.kill("SIGKILL");
  for (const pid of children) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  await init.exited;
}
