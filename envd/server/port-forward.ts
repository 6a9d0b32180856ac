import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import net from "node:net";
import { readLine, type NoLine } from "./read-line.js";

/**
 * The user-port forwarder for sandboxes that share the host's network (the
 * process runtime on the host's filesystem), on the same wire as the guest
 * init's (rootfs/init/forward.c): after `CONNECT 49982`, the host writes
 * `TCP <port>\n`; envd answers `OK\n` once it has connected to that port, or
 * `ERR <port>: <why>\n` and closes.
 *
 * Sharing the host's network means 127.0.0.1:<port> may be anything on the
 * host, so a port is forwarded only when the socket listening on it belongs
 * to a process of this sandbox: its pid namespace when it has one (every
 * process envd can see), else envd's own descendants.
 */
const LINE_TIMEOUT_MS = 10_000;
const CONNECT_TIMEOUT_MS = 10_000;
const TCP_LISTEN = "0A";

interface Listening {
  inode: string;
  /** Where to connect to reach it: the bound address, or loopback for a wildcard one. */
  host: string;
}

/** Sockets in LISTEN state on `port`, from /proc/net/tcp{,6} of envd's network namespace. */
export function listeningOn(port: number, procNet = "/proc/self/net"): Listening[] {
  const out: Listening[] = [];
  for (const [file, v6] of [["tcp", false], ["tcp6", true]] as const) {
    let text: string;
    try {
      text = readFileSync(`${procNet}/${file}`, "latin1");
    } catch {
      continue; // no IPv6
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] !== TCP_LISTEN) continue;
      const [addrHex, portHex] = f[1]!.split(":");
      if (parseInt(portHex!, 16) !== port) continue;
      out.push({ inode: f[9]!, host: connectHost(addrHex!, v6) });
    }
  }
  return out;
}

/** The address to dial for a listening socket bound to `hex` (as /proc/net/tcp prints it: 32-bit words in host order). */
function connectHost(hex: string, v6: boolean): string {
  const bytes = Buffer.alloc(hex.length / 2);
  for (let w = 0; w < hex.length / 8; w++) bytes.writeUInt32LE(parseInt(hex.slice(w * 8, w * 8 + 8), 16), w * 4);
  if (!v6) return bytes.every((b) => b === 0) ? "127.0.0.1" : Array.from(bytes).join(".");
  if (bytes.every((b) => b === 0)) return "::1";
  // An IPv4-mapped address (::ffff:a.b.c.d) is dialled as IPv4.
  if (bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) {
    const v4 = Array.from(bytes.subarray(12)).join(".");
    return v4 === "0.0.0.0" ? "127.0.0.1" : v4;
  }
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i).toString(16));
  return groups.join(":");
}

function numericDirs(dir: string): number[] {
  try {
    return readdirSync(dir).filter((n) => /^\d+$/.test(n)).map(Number);
  } catch {
    return [];
  }
}

/** The processes that make up this sandbox, as envd sees them. */
export function sandboxPids(self = process.pid): number[] {
  const all = numericDirs("/proc");
  let init = "";
  try {
    init = readFileSync("/proc/1/cmdline", "latin1");
  } catch {
    // no /proc/1: fall through to descendants
  }
  // In the sandbox's own pid namespace, pid 1 is its init (tagged by the runtime): everything visible is ours.
  if (init.includes("locale2b-sandbox:")) return all;
  const children = new Map<number, number[]>();
  for (const pid of all) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    } catch {
      continue;
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    const list = children.get(ppid);
    if (list) list.push(pid);
    else children.set(ppid, [pid]);
  }
  const out: number[] = [];
  const queue = [self];
  while (queue.length) {
    const pid = queue.pop()!;
    out.push(pid);
    queue.push(...(children.get(pid) ?? []));
  }
  return out;
}

/** Whether one of `pids` holds a socket with one of these inodes open. */
export function ownsSocket(pids: number[], inodes: Set<string>): boolean {
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // gone, or not ours to read
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m && inodes.has(m[1]!)) return true;
    }
  }
  return false;
}

/** Where to connect for `port`, or why not. */
export function resolveSandboxPort(port: number): { host: string } | { error: string } {
  const listening = listeningOn(port);
  if (!listening.length) return { error: "connection refused" };
  const inodes = new Set(listening.map((l) => l.inode));
  if (!ownsSocket(sandboxPids(), inodes)) {
    return { error: "the process listening there is not in this sandbox (the sandbox shares the host's network)" };
  }
  // Prefer IPv4 loopback when a wildcard socket offers it (what the guest init dials).
  return { host: listening.find((l) => l.host === "127.0.0.1")?.host ?? listening[0]!.host };
}

/**
 * Serves one forwarder connection: `rest` is what followed the CONNECT line.
 * Never throws; a bad request or an unreachable port is answered with `ERR`.
 */
export function serveForward(socket: net.Socket, rest: Buffer): void {
  const fail = (line: string) => void socket.end(`${line}\n`);
  const noLine = (why: NoLine) =>
    fail(why === "timeout" ? `ERR bad request: no 'TCP <port>' line within ${LINE_TIMEOUT_MS / 1000} s` : "ERR bad request");
  readLine(socket, rest, 64, (line, after) => forward(socket, line, after, fail), noLine, LINE_TIMEOUT_MS);
}

/** Connects to the port a `TCP <port>` line names, then relays; `fail` answers `ERR` instead. */
function forward(socket: net.Socket, line: string, after: Buffer, fail: (line: string) => void): void {
  const m = /^TCP (\d{1,5})$/.exec(line);
  const port = m ? Number(m[1]) : 0;
  if (!m || port < 1 || port > 65535) return fail("ERR bad request");
  let target: ReturnType<typeof resolveSandboxPort>;
  try {
    target = resolveSandboxPort(port);
  } catch (err) {
    target = { error: `cannot inspect the sandbox's sockets: ${(err as Error).message}` };
  }
  if ("error" in target) return fail(`ERR ${port}: ${target.error}`);
  const upstream = net.connect({ host: target.host, port, allowHalfOpen: true });
  upstream.setNoDelay(true);
  let connected = false;
  const connectTimer = setTimeout(() => {
    upstream.destroy();
    fail(`ERR ${port}: timed out`);
  }, CONNECT_TIMEOUT_MS);
  upstream.on("error", (err: NodeJS.ErrnoException) => {
    clearTimeout(connectTimer);
    if (connected) return socket.destroy();
    fail(`ERR ${port}: ${err.code === "ECONNREFUSED" ? "connection refused" : err.message.toLowerCase()}`);
  });
  upstream.once("connect", () => {
    connected = true;
    clearTimeout(connectTimer);
    socket.write("OK\n");
    if (after.length) upstream.write(after);
    // pipe: back-pressure both ways, and each side's end is passed on (half-close).
    socket.pipe(upstream);
    upstream.pipe(socket);
    socket.on("close", () => upstream.destroy());
    upstream.on("close", (hadError) => hadError && socket.destroy());
    socket.resume();
  });
}
