import { watch, type FSWatcher } from "node:fs";
import { readdir } from "node:fs/promises";
import { basename, dirname, join, relative } from "node:path";
import { EventType } from "../../gen/ts/filesystem/filesystem_pb.js";
import { errnoOf } from "./errors.js";
import { byteString, fsPath, shown } from "./raw-names.js";
import { mapLimit, snapshot, watchError, type Snap } from "./snapshot.js";

/**
 * How long the first raw event of a burst waits for the rest: inotify reports
 * a rename as two events (old name gone, new name there) read together, and a
 * create is usually followed by writes.
 */
const FLUSH_MS = 5;

/**
 * One classified change: `path` absolute (UTF-8, U+FFFD for bytes that are
 * not), `fsPath` the real path for fs calls, `name` relative to the watched root.
 */
export interface TreeEvent {
  path: string;
  fsPath: Buffer;
  name: string;
  type: EventType;
}

interface DirNode {
  path: string;
  handle: FSWatcher;
  /** `dev:ino` of the directory watched. */
  key: string;
  ino: bigint;
  entries: Map<string, Snap>;
}

interface Pending {
  /** When its first notification came. */
  since: number;
  dir: string;
  /** undefined: the whole directory must be re-read (the kernel gave no name). */
  name: string | undefined;
  renames: number;
  changes: number;
}

export interface TreeWatcherOptions {
  root: string;
  recursive: boolean;
  /** Receives each burst of events in order; the watcher waits for it before classifying more. */
  sink(events: TreeEvent[]): Promise<void> | void;
  /** The watch broke (e.g. the watch limit was hit); no more events follow. */
  onError(err: Error): void;
}

/**
 * inotify-like events for a directory (and, when recursive, its subtree)
 * built on `fs.watch`: one non-recursive watch per directory plus a stat
 * cache per directory to tell creates, writes, chmods, removes and renames
 * apart, since `fs.watch` only says "rename" or "change". Paths are byte
 * strings inside (raw-names.ts), so names that are not UTF-8 are watched too.
 */
/** How long a name seen appearing (but already gone) waits for the notification of its going. */
const GHOST_MS = 2_000;

/**
 * Files envd is writing now (an upload, from its create to its chown and
 * chmod), by byte-string path → when it began. Their notifications wait
 * (at most HOLD_MS from the first) until the upload ends, so that a
 * watcher reports the upload as E2B's envd does, whatever the machine's
 * load: a new file as CREATE, CHMOD (it is given to the user), WRITE, an
 * existing one as CHMOD, WRITE. `fs.watch` says only "change" for
 * IN_ATTRIB and IN_MODIFY alike, and a chown to the owner a file already has
 * leaves no trace in its stat: the end of an upload is its CHMOD.
 */
const uploads = new Map<string, { ended: boolean; at: number }>();
const MAX_UPLOADS = 4096;
/** The longest an upload's notifications wait for its end (a large upload shows its progress after this). */
const HOLD_MS = 1_000;
/** How long an upload's end is remembered for the notifications that come after it. */
const ENDED_MS = 2_000;

function forgetOldUploads(now: number): void {
  if (uploads.size < MAX_UPLOADS) return;
  for (const [p, u] of uploads) if (now - u.at > (u.ended ? ENDED_MS : HOLD_MS) || uploads.size >= MAX_UPLOADS) uploads.delete(p);
}

/** envd begins to write `path` (absolute, UTF-8) for an upload. */
export function uploadStarted(path: string): void {
  const now = Date.now();
  forgetOldUploads(now);
  uploads.set(byteString(path), { ended: false, at: now });
}

/** The upload of `path` ended: `attributes` when envd set its owner and mode (it did unless it failed). */
export function uploadEnded(path: string, attributes: boolean): void {
  const key = byteString(path);
  if (attributes) uploads.set(key, { ended: true, at: Date.now() });
  else uploads.delete(key);
}

/** Are `path`'s notifications held for an upload under way (since `since`)? */
function heldForUpload(path: string, since: number): boolean {
  const u = uploads.get(path);
  return u !== undefined && !u.ended && Date.now() - since < HOLD_MS;
}

/** Is this notification held for an upload under way? (One without a name re-reads its directory: never held.) */
function held(p: Pending): boolean {
  return p.name !== undefined && heldForUpload(join(p.dir, p.name), p.since);
}

/** Did an upload just end at `path`, and has this watcher (`reported`: path → that end) not said so yet? */
function takeUploadEnd(path: string, reported: Map<string, number>): boolean {
  const u = uploads.get(path);
  const now = Date.now();
  for (const [p, at] of reported) if (now - at > ENDED_MS) reported.delete(p);
  if (!u?.ended || now - u.at > ENDED_MS || reported.get(path) === u.at) return false;
  reported.set(path, u.at);
  return true;
}

export class TreeWatcher {
  private readonly nodes = new Map<string, DirNode>();
  private readonly pending = new Map<string, Pending>();
  /**
   * Names that appeared (one "rename" notification) but were already gone
   * when we looked, and not known before: the notification of their going
   * may come in the next burst. path → when seen.
   */
  private readonly ghosts = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** Ends of uploads this watcher has reported (path → when the upload ended). */
  private readonly uploadEnds = new Map<string, number>();
  /** The burst being classified and handed to the sink. */
  private current: Promise<void> | undefined;
  private closed = false;

  private readonly opts: TreeWatcherOptions;

  constructor(opts: TreeWatcherOptions) {
    const root = opts.root.length > 1 ? opts.root.replace(/\/+$/, "") || "/" : opts.root;
    this.opts = { ...opts, root: byteString(root) };
  }

  /** Watches the root (and subtree); throws if the root cannot be watched. */
  async start(): Promise<void> {
    this.running = true;
    try {
      await this.addDir(this.opts.root, undefined);
    } finally {
      this.running = false;
    }
    this.schedule();
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    for (const node of this.nodes.values()) node.handle.close();
    this.nodes.clear();
    this.pending.clear();
  }

  private rel(path: string): string {
    return shown(relative(this.opts.root, path));
  }

  private event(path: string, type: EventType): TreeEvent {
    return { path: shown(path), fsPath: fsPath(path), name: this.rel(path), type };
  }

  /** Watches `path` and records its entries; with `out`, they are reported as created. */
  private async addDir(path: string, out: TreeEvent[] | undefined): Promise<void> {
    if (this.closed || this.nodes.has(path)) return;
    const self = await snapshot(fsPath(path));
    const isRoot = path === this.opts.root;
    if (!self || self === "error" || !self.dir) {
      if (isRoot) throw Object.assign(new Error(`cannot watch ${shown(path)}: not a directory`), { code: "ENOTDIR" });
      return;
    }
    const key = `${self.dev}:${self.ino}`;
    if (this.isOwnAncestor(path, key)) return; // a bind mount of a parent inside itself
    let handle: FSWatcher;
    try {
      handle = watch(fsPath(path), { persistent: false, encoding: "latin1" }, (type, filename) => this.onRaw(path, type, filename));
    } catch (err) {
      const code = errnoOf(err);
      if (!isRoot && (code === "ENOENT" || code === "ENOTDIR")) return;
      throw watchError(shown(path), err);
    }
    handle.on("error", (err) => this.onHandleError(path, err));
    const node: DirNode = { path, handle, key, ino: self.ino, entries: new Map() };
    this.nodes.set(path, node);
    let names: string[];
    try {
      names = await readdir(fsPath(path), { encoding: "latin1" });
    } catch (err) {
      if (isRoot) throw err;
      this.closeSubtree(path);
      return;
    }
    const snaps = await mapLimit(names, (n) => snapshot(fsPath(join(path, n))));
    for (let i = 0; i < names.length; i++) {
      const snap = snaps[i];
      if (!snap || snap === "error" || this.closed || node.entries.has(names[i]!)) continue;
      const child = join(path, names[i]!);
      node.entries.set(names[i]!, snap);
      out?.push(this.event(child, EventType.CREATE));
      // Written before its new directory was watched: the write happened all the same.
      if (out && !snap.dir && snap.size > 0n) out.push(this.event(child, EventType.WRITE));
      if (snap.dir && this.opts.recursive) await this.addDir(child, out);
    }
  }

  private isOwnAncestor(path: string, key: string): boolean {
    for (let dir = path; dir !== this.opts.root && dir !== dirname(dir); ) {
      dir = dirname(dir);
      if (this.nodes.get(dir)?.key === key) return true;
    }
    return false;
  }

  private closeSubtree(path: string): void {
    for (const [p, node] of this.nodes) {
      if (p === path || p.startsWith(path.endsWith("/") ? path : `${path}/`)) {
        node.handle.close();
        this.nodes.delete(p);
      }
    }
  }

  private onHandleError(path: string, err: Error): void {
    if (this.closed) return;
    if (path === this.opts.root) {
      this.fail(watchError(shown(path), err));
    } else {
      this.closeSubtree(path);
    }
  }

  private fail(err: Error): void {
    if (this.closed) return;
    this.close();
    this.opts.onError(err);
  }

  private onRaw(dir: string, type: string, filename: string | Buffer | null): void {
    if (this.closed || !this.nodes.has(dir)) return;
    const name = filename === null ? undefined : String(filename);
    const key = `${dir}\0${name ?? "\0"}`;
    let p = this.pending.get(key);
    if (!p) {
      p = { since: Date.now(), dir, name, renames: 0, changes: 0 };
      this.pending.set(key, p);
    }
    if (type === "rename") p.renames++;
    else p.changes++;
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.running || this.closed || this.pending.size === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.current = this.run();
    }, FLUSH_MS);
  }

  /**
   * Hands every change the kernel has reported so far to the sink, without
   * waiting out FLUSH_MS: a client that polls right after a write it made
   * (GetWatcherEvents) sees its events, as with E2B's envd, which reads
   * inotify as events come.
   */
  async settle(): Promise<void> {
    // Notifications read by this turn of the event loop's poll (the kernel queued them before the
    // request that asks for them was sent) are dispatched before a setImmediate callback.
    await new Promise<void>((resolve) => setImmediate(resolve));
    while (!this.closed) {
      if (this.running) {
        await this.current;
        continue;
      }
      // (Notifications of an upload still under way are not waited for.)
      if (![...this.pending.values()].some((p) => !held(p))) return;
      clearTimeout(this.timer);
      this.timer = undefined;
      await (this.current = this.run());
    }
  }

  private async run(): Promise<void> {
    this.running = true;
    try {
      while (!this.closed) {
        const batch = this.takeBatch();
        if (batch.length === 0) break;
        const events = await this.classify(batch);
        if (events.length > 0 && !this.closed) await this.opts.sink(events);
      }
    } catch (err) {
      this.fail(err instanceof Error ? err : new Error(String(err)));
    } finally {
      this.running = false;
    }
    this.schedule();
  }

  /** The notifications to classify now: all but those held for an upload under way. */
  private takeBatch(): Pending[] {
    const batch: Pending[] = [];
    for (const [key, p] of this.pending) {
      if (held(p)) continue;
      batch.push(p);
      this.pending.delete(key);
    }
    return batch;
  }

  /** Turns a burst of raw notifications into events, updating the stat cache. */
  private async classify(batch: Pending[]): Promise<TreeEvent[]> {
    type Item = { dir: string; name: string; renames: number; changes: number; rescan: boolean };
    const items: Item[] = [];
    for (const p of batch) {
      if (p.name !== undefined) {
        items.push({ dir: p.dir, name: p.name, renames: p.renames, changes: p.changes, rescan: false });
        continue;
      }
      const node = this.nodes.get(p.dir);
      if (!node) continue;
      const names = new Set([...node.entries.keys(), ...(await readdir(fsPath(p.dir), { encoding: "latin1" }).catch(() => []))]);
      for (const name of names) items.push({ dir: p.dir, name, renames: 1, changes: 0, rescan: true });
    }
    const snaps = await mapLimit(items, (it) => snapshot(fsPath(join(it.dir, it.name))));
    // The kernel names events about a watched directory itself (deleted,
    // moved away) after that directory: those only end its watch.
    const selfGone = new Set<string>();
    for (const dir of new Set(items.filter((it) => it.name === basename(it.dir)).map((it) => it.dir))) {
      const node = this.nodes.get(dir);
      const self = await snapshot(fsPath(dir));
      if (node && self !== "error" && (!self || `${self.dev}:${self.ino}` !== node.key)) selfGone.add(dir);
    }

    // Inodes that disappeared under one name and appeared under another in this burst were renamed.
    const created = new Set<bigint>();
    const removed = new Set<bigint>();
    items.forEach((it, i) => {
      const old = this.nodes.get(it.dir)?.entries.get(it.name);
      const snap = snaps[i];
      if (snap === "error") return;
      if (snap && (!old || old.ino !== snap.ino)) created.add(snap.ino);
      if (old && (!snap || old.ino !== snap.ino)) removed.add(old.ino);
    });

    // Names that appeared and vanished between two looks (no inode to match):
    // a known entry of the same directory that vanished before one of them
    // most likely moved there.
    // (A single notification counts: the name's removal may come in the next burst.)
    const transients = new Set<number>();
    items.forEach((it, i) => {
      const selfEvent = it.name === basename(it.dir) || selfGone.has(it.dir);
      if (!selfEvent && snaps[i] === null && it.renames >= 1 && !this.nodes.get(it.dir)?.entries.has(it.name)) transients.add(i);
    });
    const now = Date.now();
    for (const [path, at] of this.ghosts) if (now - at > GHOST_MS) this.ghosts.delete(path);
    const movedToTransient = (i: number): boolean => {
      for (const j of transients) {
        if (j > i && items[j]!.dir === items[i]!.dir) {
          transients.delete(j);
          return true;
        }
      }
      return false;
    };

    const out: TreeEvent[] = [];
    const emit = (path: string, type: EventType) => out.push(this.event(path, type));
    // Watches of vanished directories end after the burst, so that the
    // removals of their entries reported in the same burst are still seen.
    const gone: [string, string][] = [...selfGone].map((dir) => [dir, this.nodes.get(dir)!.key]);
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      const snap = snaps[i]!;
      const node = this.nodes.get(it.dir);
      if (!node || snap === "error" || this.closed) continue;
      // A directory moved within the tree keeps its entries: its self-event is no removal.
      if (selfGone.has(it.dir) && it.name === basename(it.dir) && created.has(node.ino)) continue;
      const path = join(it.dir, it.name);
      const old = node.entries.get(it.name);
      if (snap === null) {
        if (old) {
          node.entries.delete(it.name);
          const child = old.dir ? this.nodes.get(path) : undefined;
          if (child) gone.push([path, child.key]);
          // Written, then gone before we looked: the write still happened.
          if (it.changes > 0 && !old.dir) emit(path, EventType.WRITE);
          emit(path, created.has(old.ino) || movedToTransient(i) ? EventType.RENAME : EventType.REMOVE);
        } else if (!selfGone.has(it.dir) && it.name !== basename(it.dir) && (it.renames >= 2 || this.ghosts.has(path))) {
          // Appeared and vanished between two looks (its two notifications in one burst, or across two).
          this.ghosts.delete(path);
          emit(path, EventType.CREATE);
          emit(path, EventType.REMOVE);
        } else if (it.renames === 1 && !selfGone.has(it.dir) && it.name !== basename(it.dir)) {
          this.ghosts.set(path, now);
        }
        continue;
      }
      node.entries.set(it.name, snap);
      this.ghosts.delete(path);
      const attributes = !snap.dir && takeUploadEnd(path, this.uploadEnds);
      if (!old || old.ino !== snap.ino || old.dir !== snap.dir) {
        if (old?.dir) this.closeSubtree(path);
        emit(path, EventType.CREATE);
        // (E2B's envd: open with O_CREAT, chown, write.)
        if (attributes) emit(path, EventType.CHMOD);
        if (it.changes > 0 && !snap.dir) emit(path, EventType.WRITE);
        // A directory moved within the tree brings its entries along silently.
        if (snap.dir && this.opts.recursive) await this.addDir(path, removed.has(snap.ino) ? undefined : out);
        continue;
      }
      const meta = old.mode !== snap.mode || old.uid !== snap.uid || old.gid !== snap.gid;
      if (snap.dir) {
        // Node reports every event on a directory entry as "rename" (the
        // kernel flags it IN_ISDIR); on the same inode it is an attribute change.
        if (meta) emit(path, EventType.CHMOD);
        continue;
      }
      if (it.changes === 0 && !it.rescan) continue;
      const data = old.size !== snap.size || old.mtimeNs !== snap.mtimeNs;
      if (meta || attributes) emit(path, EventType.CHMOD);
      // inotify cannot be asked which of IN_MODIFY/IN_ATTRIB fired; a change
      // that left no trace in the stat is most likely a write.
      if (data || (!meta && !attributes && !it.rescan)) emit(path, EventType.WRITE);
    }
    for (const [path, key] of gone) {
      if (this.nodes.get(path)?.key === key) this.closeSubtree(path);
    }
    return out;
  }
}
