import { writev } from "node:fs";
import type { IncomingMessage } from "node:http";
import { RequestAbortedError } from "./body.js";

/** Request bytes gathered (while a write is on its way to disk) before the socket is paused. */
const GATHER_BYTES = 2 * 1024 * 1024;

/**
 * Writes a request body straight to the open file `fd`, in order, with no
 * stream in between: the chunks that arrive while one write is under way go
 * down together in the next writev, and the request is paused whenever
 * more than `GATHER_BYTES` wait (memory stays flat whatever the size).
 * Resolves once the whole body is on disk; rejects with the write's error,
 * or RequestAbortedError when the client goes away first. After a
 * rejection the rest of the body is read and dropped, so an error answer
 * can still be sent.
 */
export function receiveInto(fd: number, req: IncomingMessage): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let writing = false;
    let ended = false;
    let settled = false;
    let paused = false;

    const cleanup = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      cleanup();
      pending = [];
      if (!req.complete && !req.destroyed) req.resume();
      reject(err);
    };
    const flush = () => {
      if (writing || settled) return;
      if (pending.length === 0) {
        if (ended) {
          settled = true;
          cleanup();
          resolve();
        }
        return;
      }
      const batch = pending;
      pending = [];
      pendingBytes = 0;
      writing = true;
      if (paused) {
        paused = false;
        req.resume();
      }
      writeAll(fd, batch, (err) => {
        writing = false;
        if (err) fail(err);
        else flush();
      });
    };
    const onData = (chunk: Buffer) => {
      pending.push(chunk);
      pendingBytes += chunk.length;
      if (pendingBytes >= GATHER_BYTES && !paused) {
        paused = true;
        req.pause();
      }
      flush();
    };
    const onEnd = () => {
      ended = true;
      flush();
    };
    const onError = () => fail(new RequestAbortedError());
    const onClose = () => {
      if (!req.complete) fail(new RequestAbortedError());
    };
    req.on("data", onData);
    req.once("end", onEnd);
    req.once("error", onError);
    req.once("close", onClose);
  });
}

/** writev until every byte of `buffers` is written (a short write goes on with the rest). */
export function writeAll(fd: number, buffers: Buffer[], done: (err: Error | null) => void): void {
  writev(fd, buffers, (err, written) => {
    if (err) return done(err);
    if (written === 0) return done(new Error("the disk took no bytes of a write"));
    let left = written;
    let i = 0;
    while (i < buffers.length && left >= buffers[i]!.length) left -= buffers[i++]!.length;
    if (i === buffers.length) return done(null);
    const rest = buffers.slice(i);
    rest[0] = rest[0]!.subarray(left);
    writeAll(fd, rest, done);
  });
}
