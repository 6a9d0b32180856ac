import http from "node:http";
import net from "node:net";
import type { Duplex } from "node:stream";
import { FORWARD_PORT } from "../../envd/version.js";

/** How long the `CONNECT <port>` handshake may take before the dial fails. */
const HANDSHAKE_TIMEOUT_MS = 10_000;

// Every port but envd's goes through the forwarder (FORWARD_PORT): vsock has no wildcard listener.
export { FORWARD_PORT };

export class DialError extends Error {
  constructor(message: string, readonly code: string) {
    super(message);
    this.name = "DialError";
  }
}

/**
 * Dials a port inside a sandbox over a hybrid-vsock Unix socket
 * (Firecracker's convention, also vhost-device-vsock's and the process
 * runtime's): write `CONNECT <port>\n`, read `OK <n>\n`, then the socket is a
 * byte stream to the guest port. Fails with a clear error, never hangs.
 */
export async function dialHybridVsock(
  socketPath: string,
  port: number,
  timeoutMs = HANDSHAKE_TIMEOUT_MS,
  gate?: VsockGate,
): Promise<net.Socket> {
  if (gate && !(await gate.pass())) {
    throw new DialError("the sandbox's VM is stopped (paused) and the control plane is shutting down: nothing may reach it now", "ECANCELED");
  }
  const socket = await dialOnce(socketPath, port, timeoutMs);
  return gate ? gate.guard(socket) : socket;
}

/**
 * Dials a TCP port on the guest's 127.0.0.1 through the init's forwarder
 * (FORWARD_PORT). Fails with the guest's reason (nothing listening there, or
 * no forwarder in this sandbox), never hangs.
 */
export async function dialGuestPort(
  socketPath: string,
  port: number,
  timeoutMs = HANDSHAKE_TIMEOUT_MS,
  gate?: VsockGate,
): Promise<net.Socket> {
  const socket = await dialHybridVsock(socketPath, FORWARD_PORT, timeoutMs, gate).catch((err: DialError) => {
    throw new DialError(`port forwarding is not available in this sandbox (${err.message})`, err.code);
  });
  socket.write(`TCP ${port}\n`);
  const line = await readLine(socket, timeoutMs).catch((err: Error) => {
    socket.destroy();
    throw new DialError(`no answer from the sandbox's port forwarder for port ${port}: ${err.message}`, "ETIMEDOUT");
  });
  if (line !== "OK") {
    socket.destroy();
    // The forwarder says `ERR <port>: <why>`; the port is already in this message.
    const why = line.startsWith("ERR ") ? line.slice(4).replace(new RegExp(`^${port}: `), "") : `unexpected answer '${line.slice(0, 80)}'`;
    throw new DialError(`port ${port} in the sandbox: ${why}`, "ECONNREFUSED");
  }
  return socket;
}

/** Why a line could not be read: nothing in time, the peer closed (or failed), or no newline in 256 bytes. */
class LineError extends Error {
  constructor(readonly reason: "timeout" | "closed" | "too long") {
    super(reason === "timeout" ? "timed out" : reason === "closed" ? "the connection closed" : "answer too long");
  }
}

/** Reads one `\n`-terminated line (at most 256 bytes), leaving what follows unread. */
function readLine(socket: net.Socket, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const done = (err: LineError | undefined, line?: string) => {
      clearTimeout(timer);
      socket.off("data", onData);
      socket.off("close", onClose);
      socket.off("error", onClose);
      if (err) reject(err);
      else resolve(line!);
    };
    const timer = setTimeout(() => done(new LineError("timeout")), timeoutMs);
    const onClose = () => done(new LineError("closed"));
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const nl = buffered.indexOf(10);
      if (nl < 0) {
        if (buffered.length > 256) done(new LineError("too long"));
        return;
      }
      const rest = buffered.subarray(nl + 1);
      if (rest.length) socket.unshift(rest);
      done(undefined, buffered.subarray(0, nl).toString("latin1").trim());
    };
    socket.on("data", onData);
    socket.once("close", onClose);
    socket.once("error", onClose);
  });
}

/** Connects to the Unix socket, writes `CONNECT <port>`, and reads the `OK` line, all within `timeoutMs`. */
async function dialOnce(socketPath: string, port: number, timeoutMs: number): Promise<net.Socket> {
  const deadline = Date.now() + timeoutMs;
  const timedOut = () => new DialError(`sandbox did not answer the vsock handshake on ${socketPath} within ${timeoutMs} ms`, "ETIMEDOUT");
  const socket = net.createConnection(socketPath);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(timedOut()), timeoutMs);
      const onError = (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        reject(new DialError(`cannot reach the sandbox's vsock socket ${socketPath}: ${err.code ?? err.message}`, err.code ?? "EIO"));
      };
      socket.once("error", onError);
      socket.once("connect", () => {
        clearTimeout(timer);
        socket.off("error", onError);
        resolve();
      });
    });
    socket.write(`CONNECT ${port}\n`);
    const line = await readLine(socket, Math.max(1, deadline - Date.now())).catch((err: LineError) => {
      if (err.reason === "timeout") throw timedOut();
      if (err.reason === "too long") throw new DialError("invalid vsock handshake reply (no newline)", "EPROTO");
      throw new DialError(`the sandbox closed the vsock connection during the handshake (${socketPath})`, "ECONNRESET");
    });
    if (!line.startsWith("OK")) throw new DialError(`vsock handshake refused for port ${port}: '${line}'`, "ECONNREFUSED");
    socket.setNoDelay(true);
    return socket;
  } catch (err) {
    socket.destroy();
    throw err;
  }
}

/**
 * Holds a sandbox's vsock traffic while its VM is stopped. vhost-device-vsock
 * (the qemu runtime's vsock backend) silently loses the VM's vsock for good
 * when the host writes, dials or closes while the guest is stopped, so during
 * an in-memory pause every write, end, destroy and new dial waits here until
 * the VM runs again. Reads are not held: the stopped guest sends nothing.
 */
export class VsockGate {
  /** Resolves true when released (go on), false when abandoned (the control plane is stopping). */
  private held: { promise: Promise<boolean>; settle: (go: boolean) => void } | undefined;
  /** Guarded sockets not yet closed, with their own (unheld) destroy. */
  private readonly live = new Map<net.Socket, (err?: Error) => void>();
  private abandoned = false;

  get isHeld(): boolean {
    return this.held !== undefined;
  }

  /** How many connections through this gate are open. */
  get liveCount(): number {
    return this.live.size;
  }

  hold(): void {
    if (this.held) return;
    let settle!: (go: boolean) => void;
    const promise = new Promise<boolean>((r) => (settle = r));
    this.held = { promise, settle };
  }

  release(): void {
    if (this.abandoned) return;
    const held = this.held;
    this.held = undefined;
    held?.settle(true);
  }

  /**
   * The control plane is stopping with the VM still stopped: what waits here
   * never goes through (a dial fails, a deferred write or close is dropped),
   * since reaching the stopped VM would break its vsock for good.
   */
  abandon(): void {
    const held = this.held;
    if (!held) return;
    this.abandoned = true;
    held.settle(false);
  }

  /** Undefined when not held (go on now), else whether the hold ends in a release. */
  wait(): Promise<boolean> | undefined {
    return this.abandoned ? Promise.resolve(false) : this.held?.promise;
  }

  /** True at once when not held; else whether the hold ended in a release. */
  async pass(): Promise<boolean> {
    return (await this.wait()) ?? true;
  }

  /**
   * Closes every open connection through the gate now, hold or not (the
   * caller knows the VM runs), and resolves once each has closed.
   */
  async destroyLive(): Promise<void> {
    const closing = [...this.live].map(
      ([socket, destroy]) =>
        new Promise<void>((resolve) => {
          if (socket.closed) return resolve();
          socket.once("close", () => resolve());
          destroy();
        }),
    );
    this.live.clear();
    await Promise.all(closing);
  }

  /**
   * Makes a dialed socket defer its writes, end and destroy while the gate is
   * held. net.Socket's own methods are wrapped (not the socket replaced by a
   * Duplex) so http.Agent and http2 keep the socket features they use.
   */
  guard(socket: net.Socket): net.Socket {
    const s = socket as net.Socket & {
      _write(chunk: unknown, enc: BufferEncoding, cb: (err?: Error | null) => void): void;
      _writev?(chunks: unknown[], cb: (err?: Error | null) => void): void;
      _final(cb: (err?: Error | null) => void): void;
    };
    const later = <A extends unknown[]>(fn: (...args: A) => void) =>
      (...args: A): void => {
        const wait = this.wait();
        if (wait) void wait.then((go) => go && fn(...args));
        else fn(...args);
      };
    const write = s._write.bind(s);
    s._write = later(write);
    if (s._writev) s._writev = later(s._writev.bind(s));
    s._final = later(s._final.bind(s));
    const destroy = s.destroy.bind(s);
    this.live.set(s, destroy);
    s.once("close", () => this.live.delete(s));
    s.destroy = (err?: Error) => {
      const wait = this.wait();
      if (!wait) return destroy(err);
      void wait.then((go) => go && destroy(err));
      return s;
    };
    return s;
  }
}

/**
 * An http.Agent whose connections are hybrid-vsock dials: keep-alive, pooled
 * per sandbox, so the handshake is paid once per connection, not per request.
 */
export class HybridVsockAgent extends http.Agent {
  constructor(
    readonly socketPath: string,
    readonly port: number,
    readonly gate?: VsockGate,
    /** The port the guest listens on over vsock itself (envd's); any other goes through the forwarder. */
    readonly directPort = port,
  ) {
    super({ keepAlive: true, keepAliveMsecs: 30_000, maxSockets: 512, maxFreeSockets: 64, scheduling: "lifo" });
  }

  override createConnection(
    _options: http.ClientRequestArgs,
    callback?: (err: Error | null, stream: Duplex) => void,
  ): Duplex | null | undefined {
    const dial = this.port === this.directPort ? dialHybridVsock : dialGuestPort;
    dial(this.socketPath, this.port, HANDSHAKE_TIMEOUT_MS, this.gate).then(
      (socket) => callback?.(null, socket),
      (err: Error) => callback?.(err, undefined as unknown as Duplex),
    );
    return undefined; // the callback delivers the socket
  }
}
