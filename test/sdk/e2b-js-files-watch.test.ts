// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The real `e2b` JS SDK (files: watchDir) against a real envd, in debug mode
// (E2B_DEBUG=true + E2B_SANDBOX_URL, see test/helpers/sdk.ts).
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  FileNotFoundError,
  FileType,
  FilesystemEventType,
  InvalidArgumentError,
  TimeoutError,
  type FilesystemEvent,
  type WatchHandle,
} from "e2b";
import { afterEach, describe, expect, it } from "vitest";
import { rejection, waitFor } from "../helpers/sdk.js";
import { fresh, sandbox, useFilesSandbox } from "../helpers/sdk-files.js";

let watches: WatchHandle[] = [];

useFilesSandbox();
afterEach(async () => {
  for (const w of watches) await w.stop();
  watches = [];
});

describe("watchDir", () => {
  const has = (events: FilesystemEvent[], name: string, type: FilesystemEventType) =>
    events.some((e) => e.name === name && e.type === type);

  it("reports create, write, rename and remove with names relative to the directory", async () => {
    const dir = fresh();
    const events: FilesystemEvent[] = [];
    watches.push(await sandbox.files.watchDir(dir, (e) => void events.push(e)));

    await sandbox.files.write(join(dir, "a.txt"), "1");
    await waitFor(() => has(events, "a.txt", FilesystemEventType.CREATE), "create a.txt");

    await sandbox.commands.run(`echo more >> ${join(dir, "a.txt")}`);
    await waitFor(() => has(events, "a.txt", FilesystemEventType.WRITE), "write a.txt");

    await sandbox.files.rename(join(dir, "a.txt"), join(dir, "b.txt"));
    await waitFor(() => has(events, "a.txt", FilesystemEventType.RENAME), "rename a.txt");
    await waitFor(() => has(events, "b.txt", FilesystemEventType.CREATE), "create b.txt");

    await sandbox.files.remove(join(dir, "b.txt"));
    await waitFor(() => has(events, "b.txt", FilesystemEventType.REMOVE), "remove b.txt");
  });

  it("reports names that are not valid UTF-8 (with U+FFFD), with their entry, as E2B's envd does", async () => {
    const dir = fresh();
    const events: FilesystemEvent[] = [];
    watches.push(await sandbox.files.watchDir(dir, (e) => void events.push(e), { recursive: true, includeEntry: true }));
    const name = Buffer.concat([Buffer.from(dir), Buffer.from("/x-"), Buffer.from([0xff])]);
    writeFileSync(name, "data");
    await waitFor(() => has(events, "x-\ufffd", FilesystemEventType.WRITE), () => `write x-\ufffd; saw ${JSON.stringify(events.map((e) => [e.type, e.name]))}`);
    const created = events.find((e) => e.name === "x-\ufffd" && e.type === FilesystemEventType.CREATE);
    expect(created?.entry).toMatchObject({ name: "x-\ufffd", path: join(dir, "x-\ufffd"), type: FileType.FILE });
    mkdirSync(Buffer.concat([Buffer.from(dir), Buffer.from("/sub-"), Buffer.from([0xfe])]));
    writeFileSync(Buffer.concat([Buffer.from(dir), Buffer.from("/sub-"), Buffer.from([0xfe]), Buffer.from("/in")]), "nested");
    await waitFor(() => has(events, "sub-\ufffd/in", FilesystemEventType.CREATE), "create sub-\ufffd/in");
    rmSync(name);
    await waitFor(() => has(events, "x-\ufffd", FilesystemEventType.REMOVE), "remove x-\ufffd");
  });

  it("an upload shows up as create and write of that file, and nothing else", async () => {
    const dir = fresh();
    const events: FilesystemEvent[] = [];
    watches.push(await sandbox.files.watchDir(dir, (e) => void events.push(e)));
    await sandbox.files.write(join(dir, "up.txt"), "uploaded");
    const seen = () => `write up.txt; saw ${JSON.stringify(events.map((e) => [e.type, e.name]))}`;
    await waitFor(() => has(events, "up.txt", FilesystemEventType.WRITE), seen);
    expect(has(events, "up.txt", FilesystemEventType.CREATE)).toBe(true);
    // A marker created after the upload finished: once it shows, every event of the upload has.
    await sandbox.commands.run(`touch ${join(dir, "marker")}`);
    await waitFor(() => has(events, "marker", FilesystemEventType.CREATE), "create marker");
    expect([...new Set(events.map((e) => e.name))].sort()).toEqual(["marker", "up.txt"]);
  });

  it("recursive watches report nested paths, including directories created later", async () => {
    const dir = fresh();
    mkdirSync(join(dir, "sub"));
    const events: FilesystemEvent[] = [];
    watches.push(await sandbox.files.watchDir(dir, (e) => void events.push(e), { recursive: true }));

    await sandbox.files.write(join(dir, "sub", "x.txt"), "x");
    await waitFor(() => has(events, "sub/x.txt", FilesystemEventType.CREATE), "create sub/x.txt");

    await sandbox.files.makeDir(join(dir, "later"));
    await waitFor(() => has(events, "later", FilesystemEventType.CREATE), "create later");
    await sandbox.files.write(join(dir, "later", "y.txt"), "y");
    await waitFor(() => has(events, "later/y.txt", FilesystemEventType.CREATE), "create later/y.txt");

    await sandbox.files.remove(join(dir, "sub", "x.txt"));
    await waitFor(() => has(events, "sub/x.txt", FilesystemEventType.REMOVE), "remove sub/x.txt");
  });

  it("a non-recursive watch does not report changes inside subdirectories", async () => {
    const dir = fresh();
    mkdirSync(join(dir, "sub"));
    const events: FilesystemEvent[] = [];
    watches.push(await sandbox.files.watchDir(dir, (e) => void events.push(e)));

    await sandbox.files.write(join(dir, "sub", "nested.txt"), "n");
    await sandbox.files.write(join(dir, "marker.txt"), "m");
    await waitFor(() => has(events, "marker.txt", FilesystemEventType.CREATE), "create marker.txt");
    expect(events.filter((e) => e.name.includes("nested"))).toEqual([]);
  });

  it("includeEntry attaches the entry's info to events", async () => {
    const dir = fresh();
    const events: FilesystemEvent[] = [];
    watches.push(await sandbox.files.watchDir(dir, (e) => void events.push(e), { includeEntry: true }));
    await sandbox.files.write(join(dir, "c.txt"), "ccc");
    await waitFor(() => has(events, "c.txt", FilesystemEventType.CREATE), "create c.txt");
    const created = events.find((e) => e.name === "c.txt" && e.type === FilesystemEventType.CREATE)!;
    expect(created.entry).toMatchObject({ name: "c.txt", path: join(dir, "c.txt"), type: FileType.FILE });
  });

  it("stops delivering events after stop()", async () => {
    const dir = fresh();
    const events: FilesystemEvent[] = [];
    const w = await sandbox.files.watchDir(dir, (e) => void events.push(e));
    await sandbox.files.write(join(dir, "before"), "1");
    await waitFor(() => has(events, "before", FilesystemEventType.CREATE), "create before");
    await w.stop();
    await sandbox.files.write(join(dir, "after"), "2");
    // A second watch on the same directory proves the event happened and was delivered.
    const seen: FilesystemEvent[] = [];
    watches.push(await sandbox.files.watchDir(dir, (e) => void seen.push(e)));
    await sandbox.files.write(join(dir, "after2"), "3");
    await waitFor(() => has(seen, "after2", FilesystemEventType.CREATE), "create after2");
    expect(events.filter((e) => e.name.startsWith("after"))).toEqual([]);
  });

  it("ends with TimeoutError in onExit when timeoutMs elapses", async () => {
    const dir = fresh();
    let exitErr: Error | undefined;
    let exited = false;
    watches.push(
      await sandbox.files.watchDir(dir, () => {}, {
        timeoutMs: 1000,
        onExit: (err) => {
          exited = true;
          exitErr = err;
        },
      }),
    );
    await waitFor(() => exited, "onExit");
    expect(exitErr).toBeInstanceOf(TimeoutError);
  });

  it("watching a missing directory fails with FileNotFoundError, a file with InvalidArgumentError", async () => {
    const dir = fresh();
    writeFileSync(join(dir, "file"), "x");
    expect(await rejection(sandbox.files.watchDir(join(dir, "missing"), () => {}))).toBeInstanceOf(FileNotFoundError);
    expect(await rejection(sandbox.files.watchDir(join(dir, "file"), () => {}))).toBeInstanceOf(InvalidArgumentError);
  });
});
