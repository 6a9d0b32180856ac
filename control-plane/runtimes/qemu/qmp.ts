import net from "node:net";

/** QEMU Machine Protocol: line-delimited JSON on a Unix socket, one command at a time. */
export class QmpError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "QmpError";
  }
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  command: string;
}

export class Qmp {
  private buffered = "";
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closed: Error | undefined;
  private greeted!: () => void;
  private readonly greeting = new Promise<void>((r) => (this.greeted = r));

  private constructor(private readonly socket: net.Socket) {
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => this.onData(chunk));
    socket.on("error", (err) => this.fail(new QmpError(`QMP connection failed: ${err.message}`)));
    socket.on("close", () => this.fail(new QmpError("QMP connection closed (QEMU exited?)")));
  }

  /**
   * Connects (retrying while QEMU creates the socket) and leaves capabilities
   * negotiation done. With `alive` (QEMU's process still runs), it stops
   * waiting as soon as QEMU exits instead of at the deadline only.
   */
  static async connect(path: string, timeoutMs = 10_000, alive?: () => boolean): Promise<Qmp> {
    const deadline = Date.now() + timeoutMs;
    let last: Error | undefined;
    while (Date.now() < deadline) {
      if (alive && !alive()) throw new QmpError(`QEMU exited before it opened its QMP socket ${path}`);
      try {
        const socket = await new Promise<net.Socket>((resolve, reject) => {
          const s = net.createConnection(path);
          s.once("connect", () => {
            s.off("error", reject);
            resolve(s);
          });
          s.once("error", reject);
        });
        const qmp = new Qmp(socket);
        await Promise.race([
          qmp.greeting,
          new Promise((_, reject) => setTimeout(() => reject(new QmpError("no QMP greeting within 5 s")), 5_000).unref()),
        ]);
        await qmp.execute("qmp_capabilities");
        return qmp;
      } catch (err) {
        last = err as Error;
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    throw new QmpError(`cannot reach QEMU's QMP socket ${path}: ${last?.message ?? "timed out"}`);
  }

  execute(command: string, args?: Record<string, unknown>, timeoutMs = 10_000): Promise<unknown> {
    if (this.closed) return Promise.reject(this.closed);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new QmpError(`QEMU did not answer '${command}' within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer, command });
      this.socket.write(`${JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}), id })}\n`);
    });
  }

  /** `query-status`: running, paused, shutdown, ... */
  async status(): Promise<string> {
    const res = (await this.execute("query-status")) as { status?: string };
    return res.status ?? "unknown";
  }

  close(): void {
    this.socket.destroy();
  }

  private onData(chunk: string): void {
    this.buffered += chunk;
    let nl: number;
    while ((nl = this.buffered.indexOf("\n")) >= 0) {
      const line = this.buffered.slice(0, nl).trim();
      this.buffered = this.buffered.slice(nl + 1);
      if (!line) continue;
      let msg: { QMP?: unknown; id?: number; return?: unknown; error?: { class?: string; desc?: string } };
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      if (msg.QMP) {
        this.greeted();
        continue;
      }
      if (typeof msg.id !== "number") continue; // an event
      const p = this.pending.get(msg.id);
      if (!p) continue;
      this.pending.delete(msg.id);
      clearTimeout(p.timer);
      if (msg.error) p.reject(new QmpError(`QEMU refused '${p.command}': ${msg.error.desc ?? msg.error.class}`));
      else p.resolve(msg.return);
    }
  }

  private fail(err: Error): void {
    if (this.closed) return;
    this.closed = err;
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.pending.clear();
  }
}
