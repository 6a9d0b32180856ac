import net from "node:net";

/**
 * The read end of a child's output pipe, read into pooled 64 KiB buffers
 * (Node's `onread`) instead of a fresh one per read. A stream moving hundreds
 * of MiB/s made thousands of 64 KiB buffers a second, freed only when V8
 * next collected garbage: envd's memory rose by tens of MiB while output
 * streamed. A pooled buffer goes back when every subscriber is done with it
 * (Output.release, multiplex.ts); a short read is copied out at once, so a
 * line of output never holds 64 KiB in a queue.
 */

const SIZE = 64 * 1024;
/** Reads shorter than this are copied (from Node's shared slab) and their buffer reused at once. */
const COPY_BELOW = 16 * 1024;
/** Buffers kept for reuse across all pipes (2 MiB); more in flight are left to the garbage collector when returned. */
const KEEP = 32;

/**
 * LOCALE2B_OUTPUT_COALESCE_MS (the gvisor runtime sets it, with a 1 MiB pipe:
 * LOCALE2B_OUTPUT_PIPE_SIZE, rootfs/init/spawn.c): once a pipe has carried
 * BULK_BYTES, a read that emptied it is followed by this long without
 * reading. Under gVisor every wake-up of envd by a writer is a trip through
 * its kernel: `head -c` writes 4 KiB at a time and envd woke for nearly
 * every write. Waiting lets the writer fill the pipe, and envd takes it in
 * full 64 KiB reads. Short outputs never wait; a long one's lines may be
 * delayed by at most this long.
 */
const COALESCE_MS = Number(process.env.LOCALE2B_OUTPUT_COALESCE_MS) || 0;
const BULK_BYTES = 1024 * 1024;

const free: Buffer[] = [];
let lent = 0;

function take(): Buffer {
  lent++;
  return free.pop() ?? Buffer.allocUnsafeSlow(SIZE);
}

function give(buf: Buffer): void {
  lent--;
  if (free.length < KEEP) free.push(buf);
}

/** Buffers out of the pool (pipes reading, chunks queued) and kept in it, for tests and diagnostics. */
export function readBufferStats(): { lent: number; kept: number } {
  return { lent, kept: free.length };
}

/**
 * A chunk read: `data` with the `release` that returns its buffer (undefined
 * for a copy) and the memory it holds; false from the sink stops reading
 * until `resume()`.
 */
export type ChunkSink = (data: Buffer, release: (() => void) | undefined, size: number) => boolean;

export class PooledPipe {
  readonly socket: net.Socket;
  private sink: ChunkSink | undefined;
  /** Read before a sink was attached (reading stops at the first one). */
  private early: Parameters<ChunkSink>[] = [];
  /** The buffer Node reads into next: it holds it until the pipe closes. */
  private current: Buffer | undefined;
  /** Bytes read so far (coalescing starts at BULK_BYTES). */
  private total = 0;
  private wait: NodeJS.Timeout | undefined;

  constructor(fd: number) {
    const onread = { buffer: () => (this.current = take()), callback: (n: number, buf: Buffer) => this.read(n, buf) };
    // `onread` (a buffer or a function giving the next one) is honoured by net.Socket's constructor
    // as by socket.connect(); @types/node lists it for connect() only.
    this.socket = new net.Socket({ fd, readable: true, writable: false, onread } as net.SocketConstructorOpts);
    this.socket.once("close", () => {
      clearTimeout(this.wait);
      if (this.current) give(this.current);
      this.current = undefined;
    });
  }

  /** Delivers what was read so far, then every chunk, to `sink`. */
  attach(sink: ChunkSink): void {
    this.sink = sink;
    const early = this.early;
    this.early = [];
    let go = true;
    for (const chunk of early) go = sink(...chunk) && go;
    if (go) this.socket.resume();
  }

  private read(n: number, buf: Buffer): boolean {
    let chunk: Parameters<ChunkSink>;
    if (n < COPY_BELOW) {
      // Node reads into `buf` again next (the pool hands it back): copy now.
      chunk = [Buffer.from(buf.subarray(0, n)), undefined, n];
      give(buf);
    } else {
      chunk = [buf.subarray(0, n), () => give(buf), SIZE];
    }
    this.current = undefined;
    if (!this.sink) {
      this.early.push(chunk);
      return false;
    }
    this.total += n;
    const go = this.sink(...chunk);
    if (go && n < SIZE && COALESCE_MS > 0 && this.total >= BULK_BYTES) this.coalesce();
    return go;
  }

  /** The pipe was emptied mid-stream: let the writer fill it before the next read (COALESCE_MS). */
  private coalesce(): void {
    this.socket.pause();
    this.wait = setTimeout(() => {
      this.wait = undefined;
      this.socket.resume();
    }, COALESCE_MS);
  }
}
