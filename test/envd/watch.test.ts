// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { appendFileSync, chmodSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  EventType,
  FileType,
  type Filesystem,
  type FilesystemEvent,
  type WatchDirResponse,
} from "../../gen/ts/filesystem/filesystem_pb.js";
import { basicAuth, clients, PROTOCOLS, startTestEnvd } from "../helpers/envd.js";
import { envd, fresh, fs, sleep, useTestEnvd, WAIT_MS, watching } from "../helpers/fs-fixtures.js";
import { waitFor } from "../helpers/wait.js";

const root = basicAuth("root");

useTestEnvd("watch");

/** A WatchDir stream read in the background, with a cursor to wait on events in order. */
class Watch {
  readonly messages: WatchDirResponse[] = [];
  error: unknown;
  ended = false;
  private cursor = 0;
  private readonly abort = new AbortController();

  constructor(
    client: Client<typeof Filesystem>,
    req: { path: string; recursive?: boolean; includeEntry?: boolean },
    opts: { headers?: Record<string, string>; timeoutMs?: number } = {},
  ) {
    const stream = client.watchDir(req, { headers: { ...root, ...opts.headers }, signal: this.abort.signal, timeoutMs: opts.timeoutMs });
    void (async () => {
      try {
        for await (const m of stream) this.messages.push(m);
      } catch (err) {
        this.error = err;
      } finally {
        this.ended = true;
      }
    })();
  }

  get events(): FilesystemEvent[] {
    return this.messages.flatMap((m) => (m.event.case === "filesystem" ? [m.event.value] : []));
  }

  /** Waits for the first message; it must be `start`. */
  async started(): Promise<void> {
    await this.until(() => this.messages.length > 0 || this.ended);
    if (this.error) throw this.error;
    expect(this.messages[0]?.event.case).toBe("start");
  }

  async until(cond: () => boolean, what = "condition"): Promise<void> {
    const deadline = Date.now() + WAIT_MS;
    while (!cond()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(this.summary())}`);
      if (this.ended && !cond()) throw new Error(`stream ended (${String(this.error)}) before ${what}`);
      await sleep(10);
    }
  }

  /** Waits for the next event (after the previous match) of this name and type and returns it. */
  async next(name: string, type: EventType): Promise<FilesystemEvent> {
    let found: FilesystemEvent | undefined;
    await this.until(() => {
      const evs = this.events;
      for (let i = this.cursor; i < evs.length; i++) {
        if (evs[i]!.name === name && evs[i]!.type === type) {
          found = evs[i];
          this.cursor = i + 1;
          return true;
        }
      }
      return false;
    }, `${EventType[type]} ${name}`);
    return found!;
  }

  summary(): string[] {
    return this.events.map((e) => `${EventType[e.type]} ${e.name}`);
  }

  close(): void {
    this.abort.abort();
  }
}

describe("WatchDir", () => {
  for (const protocol of PROTOCOLS) {
    it(`${protocol}: starts with {start} and streams a create`, async () => {
      const dir = fresh();
      const w = new Watch(clients(envd.url, protocol).fs, { path: dir });
      try {
        await w.started();
        writeFileSync(join(dir, "p.txt"), "");
        const ev = await w.next("p.txt", EventType.CREATE);
        expect(ev.entry).toBeUndefined();
      } finally {
        w.close();
      }
    });
  }

  it("reports create, write, chmod, rename (old then new name) and remove", async () => {
    const dir = fresh();
    const w = new Watch(fs, { path: dir });
    try {
      await w.started();
      writeFileSync(join(dir, "f.txt"), "");
      await w.next("f.txt", EventType.CREATE);
      appendFileSync(join(dir, "f.txt"), "more data");
      await w.next("f.txt", EventType.WRITE);
      chmodSync(join(dir, "f.txt"), 0o600);
      await w.next("f.txt", EventType.CHMOD);
      renameSync(join(dir, "f.txt"), join(dir, "g.txt"));
      await w.next("f.txt", EventType.RENAME);
      await w.next("g.txt", EventType.CREATE);
      rmSync(join(dir, "g.txt"));
      await w.next("g.txt", EventType.REMOVE);
      const names = w.summary();
      expect(names.indexOf("RENAME f.txt")).toBeLessThan(names.indexOf("CREATE g.txt"));
      expect(names).not.toContain("REMOVE f.txt");
    } finally {
      w.close();
    }
  });

  it("follows new subdirectories when recursive, with names relative to the watched dir", async () => {
    const dir = fresh();
    const w = new Watch(fs, { path: dir, recursive: true });
    try {
      await w.started();
      mkdirSync(join(dir, "sub"));
      await w.next("sub", EventType.CREATE);
      writeFileSync(join(dir, "sub", "x.txt"), "1");
      await w.next("sub/x.txt", EventType.CREATE);
      // Created faster than a watch can be added: still reported.
      mkdirSync(join(dir, "deep", "a", "b"), { recursive: true });
      writeFileSync(join(dir, "deep", "a", "b", "y.txt"), "2");
      await w.next("deep/a/b/y.txt", EventType.CREATE);
      rmSync(join(dir, "sub"), { recursive: true });
      await w.next("sub", EventType.REMOVE);
      expect(w.summary()).toContain("REMOVE sub/x.txt");
    } finally {
      w.close();
    }
  });

  it("does not report events in subdirectories when not recursive", async () => {
    const dir = fresh();
    mkdirSync(join(dir, "sub"));
    const w = new Watch(fs, { path: dir });
    try {
      await w.started();
      writeFileSync(join(dir, "sub", "hidden.txt"), "1");
      writeFileSync(join(dir, "marker"), "");
      await w.next("marker", EventType.CREATE);
      expect(w.events.map((e) => e.name)).not.toContain("sub/hidden.txt");
    } finally {
      w.close();
    }
  });

  it("includes entries for create/write/chmod but not for remove", async () => {
    const dir = fresh();
    const w = new Watch(fs, { path: dir, includeEntry: true });
    try {
      await w.started();
      writeFileSync(join(dir, "e.txt"), "");
      const created = await w.next("e.txt", EventType.CREATE);
      expect(created.entry?.path).toBe(join(dir, "e.txt"));
      expect(created.entry?.type).toBe(FileType.FILE);
      expect(created.entry?.owner).toBe("root");
      appendFileSync(join(dir, "e.txt"), "12345");
      const written = await w.next("e.txt", EventType.WRITE);
      expect(written.entry?.name).toBe("e.txt");
      rmSync(join(dir, "e.txt"));
      const removed = await w.next("e.txt", EventType.REMOVE);
      expect(removed.entry).toBeUndefined();
    } finally {
      w.close();
    }
  });

  it("sends keepalives per Keepalive-Ping-Interval", async () => {
    const dir = fresh();
    const w = new Watch(fs, { path: dir }, { headers: { "Keepalive-Ping-Interval": "1" } });
    try {
      await w.started();
      await w.until(() => w.messages.filter((m) => m.event.case === "keepalive").length >= 2, "two keepalives");
      expect(w.messages[0]!.event.case).toBe("start");
      expect(w.events).toEqual([]);
    } finally {
      w.close();
    }
  });

  it("ends with deadline_exceeded when Connect-Timeout-Ms expires", async () => {
    const w = new Watch(fs, { path: fresh() }, { timeoutMs: 1000 });
    await w.started();
    await w.until(() => w.ended, "end of stream");
    expect(w.error).toBeInstanceOf(ConnectError);
    expect((w.error as ConnectError).code).toBe(Code.DeadlineExceeded);
  });

  it("releases its inotify watches when the client cancels or the deadline ends the stream", async () => {
    const dir = fresh();
    const dirs = [dir, ...["a", "b", "c"].map((sub) => join(dir, sub))];
    for (const d of dirs.slice(1)) mkdirSync(d);
    expect(watching(dirs)).toBe(0);
    const w = new Watch(fs, { path: dir, recursive: true });
    await w.started();
    expect(watching(dirs)).toBe(4);
    w.close();
    await waitFor(() => watching(dirs) === 0, "watches released after cancel");

    const timed = new Watch(fs, { path: dir, recursive: true }, { timeoutMs: 1000 });
    await timed.started();
    expect(watching(dirs)).toBe(4);
    await timed.until(() => timed.ended, "deadline");
    await waitFor(() => watching(dirs) === 0, "watches released after deadline");
  });

  it("ends open streams and releases their watches when envd shuts down", async () => {
    const other = await startTestEnvd();
    const dir = fresh();
    const w = new Watch(clients(other.url).fs, { path: dir });
    await w.started();
    expect(watching([dir])).toBe(1);
    const closing = other.close();
    await w.until(() => w.ended, "end of stream");
    // `unavailable` when the end-stream gets out before the connection is cut, else `aborted`.
    expect([Code.Unavailable, Code.Aborted]).toContain((w.error as ConnectError).code);
    expect(watching([dir])).toBe(0);
    await closing;
  });

  it("refuses missing paths (not_found), files and ~otheruser (invalid_argument)", async () => {
    const dir = fresh();
    writeFileSync(join(dir, "file"), "");
    const missing = new Watch(fs, { path: join(dir, "missing") });
    await missing.until(() => missing.ended, "error");
    expect((missing.error as ConnectError).code).toBe(Code.NotFound);
    expect(missing.messages).toEqual([]);
    const file = new Watch(fs, { path: join(dir, "file") });
    await file.until(() => file.ended, "error");
    expect((file.error as ConnectError).code).toBe(Code.InvalidArgument);
    const other = new Watch(fs, { path: "~nobody/x" });
    await other.until(() => other.ended, "error");
    expect((other.error as ConnectError).code).toBe(Code.InvalidArgument);
  });
});
