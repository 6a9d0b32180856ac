import { closeSync, mkdirSync, openSync, readdirSync, readSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";

interface Segment {
  /** Offset of its first byte in the session's output. */
  start: number;
  size: number;
  path: string;
}

/**
 * A session's output on disk, addressed by byte offset from the start of
 * the session: what a poll or a stream reads, at its own pace, however far
 * behind. It keeps the newest `capBytes` (at least three quarters of it) in
 * segment files named by their start offset, deleting the oldest segment
 * when over the cap, so memory holds nothing but the segment list and a
 * control-plane restart loses nothing that was written. Offsets keep
 * counting across dropped segments: a reader learns exactly how many bytes
 * it missed.
 */
export class OutputSpool {
  private readonly segments: Segment[] = [];
  private fd: number | undefined;
  private readonly segmentBytes: number;

  constructor(
    readonly dir: string,
    readonly capBytes: number,
  ) {
    this.segmentBytes = Math.max(4096, Math.floor(capBytes / 4));
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    // Reopen what an earlier control plane wrote.
    for (const name of readdirSync(dir)) {
      const m = /^(\d+)\.out$/.exec(name);
      if (!m) continue;
      const path = join(dir, name);
      this.segments.push({ start: Number(m[1]), size: statSync(path).size, path });
    }
    this.segments.sort((a, b) => a.start - b.start);
  }

  /** Offset of the oldest byte still kept. */
  get start(): number {
    return this.segments[0]?.start ?? this.end;
  }

  /** Bytes produced so far (the offset the next byte gets). */
  get end(): number {
    const last = this.segments.at(-1);
    return last ? last.start + last.size : 0;
  }

  append(data: Uint8Array): void {
    let rest = data;
    while (rest.length > 0) {
      let last = this.segments.at(-1);
      if (!last || last.size >= this.segmentBytes) {
        if (this.fd !== undefined) closeSync(this.fd);
        const start = this.end;
        last = { start, size: 0, path: join(this.dir, `${start}.out`) };
        this.segments.push(last);
        this.fd = openSync(last.path, "a", 0o600);
      } else if (this.fd === undefined) {
        this.fd = openSync(last.path, "a", 0o600);
      }
      const n = Math.min(rest.length, this.segmentBytes - last.size);
      writeSync(this.fd, rest, 0, n);
      last.size += n;
      rest = rest.subarray(n);
    }
    this.trim();
  }

  private trim(): void {
    while (this.segments.length > 1 && this.end - this.segments[1]!.start >= (this.capBytes * 3) / 4) {
      const old = this.segments.shift()!;
      rmSync(old.path, { force: true });
    }
  }

  /**
   * Up to `maxBytes` from `offset` (clamped to what is kept): the bytes, the
   * offset they really start at (later than asked when older bytes were
   * dropped), and how many were dropped.
   */
  read(offset: number, maxBytes: number): { data: Buffer; from: number; dropped: number } {
    const from = Math.min(Math.max(offset, this.start), this.end);
    const dropped = Math.max(0, this.start - offset);
    const want = Math.min(maxBytes, this.end - from);
    const out = Buffer.allocUnsafe(want);
    let filled = 0;
    for (const seg of this.segments) {
      if (filled >= want) break;
      const segEnd = seg.start + seg.size;
      const pos = from + filled;
      if (segEnd <= pos) continue;
      const fd = openSync(seg.path, "r");
      try {
        const n = readSync(fd, out, filled, Math.min(want - filled, segEnd - pos), pos - seg.start);
        filled += n;
      } finally {
        closeSync(fd);
      }
    }
    return { data: out.subarray(0, filled), from, dropped };
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  remove(): void {
    this.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
