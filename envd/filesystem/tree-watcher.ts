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
      p = { dir, name, renames: 0, changes: 0 };
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
      void this.run();
    }, FLUSH_MS);
  }

  private async run(): Promise<void> {
    this.running = true;
    try {
      while (this.pending.size > 0 && !this.closed) {
        const batch = [...this.pending.values()];
        this.pending.clear();
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
      if (!old || old.ino !== snap.ino || old.dir !== snap.dir) {
        if (old?.dir) this.closeSubtree(path);
        emit(path, EventType.CREATE);
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
      if (meta) emit(path, EventType.CHMOD);
      // inotify cannot be asked which of IN_MODIFY/IN_ATTRIB fired; a change
      // that left no trace in the stat is most likely a write.
      if (data || (!meta && !it.rescan)) emit(path, EventType.WRITE);
    }
    for (const [path, key] of gone) {
      if (this.nodes.get(path)?.key === key) this.closeSubtree(path);
    }
    return out;
  }
}
