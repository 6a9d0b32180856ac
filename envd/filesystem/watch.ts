import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { stat, statfs } from "node:fs/promises";
import {
  EventType,
  FilesystemEventSchema,
  type FilesystemEvent,
  type WatchDirRequest,
  type WatchDirResponseSchema,
} from "../../gen/ts/filesystem/filesystem_pb.js";
import type { UserDb } from "../users.js";
import { buildEntry } from "./entry.js";
import { errnoOf, internal } from "./errors.js";
import { TreeWatcher, type TreeEvent } from "./tree-watcher.js";

/** Events a WatchDir stream holds for a slow client before the watcher waits for it. */
const STREAM_HIGH_WATER = 256;
const DEFAULT_KEEPALIVE_S = 90;

/** Filesystem magic numbers of network and FUSE filesystems (linux/magic.h). */
const NETWORK_FS = new Set([0x6969 /* nfs */, 0xff534d42 /* cifs */, 0x517b /* smb */, 0xfe534d42 /* smb2 */, 0x65735546 /* fuse */]);

/** Checks that `path` can be watched: an existing local directory (or any mount when allowed). */
export async function checkWatchable(path: string, allowNetworkMounts: boolean): Promise<void> {
  let st;
  try {
    st = await stat(path);
  } catch (err) {
    if (errnoOf(err) === "ENOENT") throw new ConnectError(`path ${path} not found`, Code.NotFound);
    if (errnoOf(err) === "ENOTDIR") throw new ConnectError(`path ${path} is not a directory`, Code.InvalidArgument);
    throw internal(`error getting file info of ${path}`, err);
  }
  if (!st.isDirectory()) throw new ConnectError(`path ${path} is not a directory`, Code.InvalidArgument);
  if (allowNetworkMounts) return;
  let fsType: number;
  try {
    fsType = (await statfs(path)).type >>> 0;
  } catch (err) {
    throw internal(`error checking the mount of ${path}`, err);
  }
  if (NETWORK_FS.has(fsType)) {
    throw new ConnectError(
      `cannot watch ${path}: it is on a network or FUSE filesystem (set allowNetworkMounts to watch it anyway)`,
      Code.InvalidArgument,
    );
  }
}

const WITH_ENTRY = new Set([EventType.CREATE, EventType.WRITE, EventType.CHMOD]);

/** Wire events for classified changes; entries only for create/write/chmod of stat-able paths. */
export async function toFilesystemEvents(users: UserDb, events: TreeEvent[], includeEntry: boolean): Promise<FilesystemEvent[]> {
  const out: FilesystemEvent[] = [];
  for (const ev of events) {
    const msg = create(FilesystemEventSchema, { name: ev.name, type: ev.type });
    if (includeEntry && WITH_ENTRY.has(ev.type)) {
      msg.entry = await buildEntry(users, ev.fsPath, { reportPath: ev.path }).catch(() => undefined);
    }
    out.push(msg);
  }
  return out;
}

/** `Keepalive-Ping-Interval` in ms: whole seconds, anything else means 90 s. */
export function keepaliveMs(headers: Headers): number {
  const raw = headers.get("keepalive-ping-interval")?.trim() ?? "";
  const seconds = /^\d+$/.test(raw) ? Number(raw) : 0;
  return (seconds > 0 ? seconds : DEFAULT_KEEPALIVE_S) * 1000;
}

/** Events between the watcher and the stream: bounded, the watcher waits when it is full. */
class StreamQueue {
  private items: FilesystemEvent[] = [];
  private wake: (() => void) | undefined;
  private space: (() => void)[] = [];
  private closed = false;
  error: Error | undefined;

  async push(events: FilesystemEvent[]): Promise<void> {
    this.items.push(...events);
    this.wake?.();
    while (this.items.length >= STREAM_HIGH_WATER && !this.closed) {
      await new Promise<void>((resolve) => this.space.push(resolve));
    }
  }

  fail(err: Error): void {
    this.error = err;
    this.wake?.();
  }

  drain(): FilesystemEvent[] {
    const items = this.items;
    this.items = [];
    this.releaseSpace();
    return items;
  }

  /** Resolves when events or an error are there, after `ms`, or on abort. */
  wait(ms: number, signal: AbortSignal): Promise<void> {
    if (this.items.length > 0 || this.error || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done);
      this.wake = done;
    });
  }

  close(): void {
    this.closed = true;
    this.items = [];
    this.releaseSpace();
  }

  private releaseSpace(): void {
    const waiters = this.space;
    this.space = [];
    for (const w of waiters) w();
  }
}

type WatchDirMessage = MessageInitShape<typeof WatchDirResponseSchema>;

/**
 * WatchDir: `{start}` once the watch is in place, then filesystem events as
 * they happen and keepalives when idle, until the client cancels or the
 * request deadline (`Connect-Timeout-Ms`) ends the stream.
 */
export async function* watchDir(
  users: UserDb,
  path: string,
  req: WatchDirRequest,
  context: HandlerContext,
  /** Open streams; calling one ends that stream with the error (used on shutdown). */
  live: Set<(err: ConnectError) => void>,
): AsyncGenerator<WatchDirMessage> {
  await checkWatchable(path, req.allowNetworkMounts);
  const queue = new StreamQueue();
  const watcher = new TreeWatcher({
    root: path,
    recursive: req.recursive,
    sink: async (events) => queue.push(await toFilesystemEvents(users, events, req.includeEntry)),
    onError: (err) => queue.fail(err),
  });
  const stop = () => {
    watcher.close();
    queue.close();
  };
  const end = (err: ConnectError) => {
    watcher.close();
    queue.fail(err);
  };
  context.signal.addEventListener("abort", stop);
  live.add(end);
  try {
    try {
      await watcher.start();
    } catch (err) {
      throw internal(`error watching ${path}`, err);
    }
    yield { event: { case: "start", value: {} } };
    const interval = keepaliveMs(context.requestHeader);
    for (;;) {
      await queue.wait(interval, context.signal);
      if (context.signal.aborted) {
        const reason: unknown = context.signal.reason;
        if (reason instanceof ConnectError) throw reason;
        return;
      }
      if (queue.error) throw internal(`watcher of ${path} failed`, queue.error);
      const events = queue.drain();
      if (events.length === 0) {
        yield { event: { case: "keepalive", value: {} } };
        continue;
      }
      for (const ev of events) yield { event: { case: "filesystem", value: ev } };
    }
  } finally {
    live.delete(end);
    context.signal.removeEventListener("abort", stop);
    stop();
  }
}
