import { Code, ConnectError } from "@connectrpc/connect";
import { randomInt } from "node:crypto";
import type { FilesystemEvent } from "../../gen/ts/filesystem/filesystem_pb.js";
import type { Logger } from "../log.js";
import type { UserDb } from "../users.js";
import { internal } from "./errors.js";
import { TreeWatcher } from "./tree-watcher.js";
import { checkWatchable, toFilesystemEvents } from "./watch.js";

/** Events a polling watcher keeps unfetched before it gives up with an error. */
export const MAX_QUEUED_EVENTS = 10_000;

const ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** `w` + 20 lowercase alphanumerics, like envd's watcher ids. */
export function newWatcherId(): string {
  let id = "w";
  for (let i = 0; i < 20; i++) id += ID_ALPHABET[randomInt(ID_ALPHABET.length)];
  return id;
}

interface PollingWatcher {
  path: string;
  tree: TreeWatcher;
  events: FilesystemEvent[];
  /** Set once the watcher broke; returned by every later GetWatcherEvents. */
  error: ConnectError | undefined;
}

export interface CreateWatcherOptions {
  recursive: boolean;
  includeEntry: boolean;
  allowNetworkMounts: boolean;
}

/**
 * The watchers of CreateWatcher / GetWatcherEvents / RemoveWatcher: each
 * collects events in memory until they are fetched, independent of the
 * request that created it.
 */
export class WatcherRegistry {
  private readonly watchers = new Map<string, PollingWatcher>();

  constructor(
    private readonly users: UserDb,
    private readonly log: Logger,
  ) {}

  async create(path: string, opts: CreateWatcherOptions): Promise<string> {
    await checkWatchable(path, opts.allowNetworkMounts);
    let id = newWatcherId();
    while (this.watchers.has(id)) id = newWatcherId();
    const fail = (w: PollingWatcher, err: ConnectError) => {
      w.error ??= err;
      w.events = [];
      w.tree.close();
      this.log.warn({ watcherId: id, path, err: err.message }, "filesystem watcher stopped");
    };
    const w: PollingWatcher = {
      path,
      events: [],
      error: undefined,
      tree: new TreeWatcher({
        root: path,
        recursive: opts.recursive,
        sink: async (raw) => {
          const events = await toFilesystemEvents(this.users, raw, opts.includeEntry);
          if (w.error) return;
          if (w.events.length + events.length > MAX_QUEUED_EVENTS) {
            fail(
              w,
              new ConnectError(
                `watcher ${id} stopped: more than ${MAX_QUEUED_EVENTS} events of ${path} were not fetched in time; remove it and create a new watcher, polling more often`,
                Code.Internal,
              ),
            );
            return;
          }
          w.events.push(...events);
        },
        onError: (err) => fail(w, internal(`watcher ${id} of ${path} failed`, err)),
      }),
    };
    try {
      await w.tree.start();
    } catch (err) {
      w.tree.close();
      throw internal(`error watching ${path}`, err);
    }
    this.watchers.set(id, w);
    return id;
  }

  /** Drains the events collected since the last call, including those of changes the kernel has reported and not yet classified. */
  async take(id: string): Promise<FilesystemEvent[]> {
    let w = this.get(id);
    await w.tree.settle();
    w = this.get(id); // (removed meanwhile: not found)
    if (w.error) throw w.error;
    const events = w.events;
    w.events = [];
    return events;
  }

  remove(id: string): void {
    const w = this.get(id);
    w.tree.close();
    this.watchers.delete(id);
  }

  close(): void {
    for (const w of this.watchers.values()) w.tree.close();
    this.watchers.clear();
  }

  private get(id: string): PollingWatcher {
    const w = this.watchers.get(id);
    if (!w) throw new ConnectError(`watcher with id ${id} not found`, Code.NotFound);
    return w;
  }
}
