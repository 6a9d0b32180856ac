// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The real `e2b` JS SDK (files: directories, entries and metadata) against a
// real envd, in debug mode (E2B_DEBUG=true + E2B_SANDBOX_URL, see test/helpers/sdk.ts).
import { mkdirSync, realpathSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { FileType, InvalidArgumentError } from "e2b";
import { describe, expect, it } from "vitest";
import { rejection } from "../helpers/sdk.js";
import { fresh, sandbox, useFilesSandbox } from "../helpers/sdk-files.js";

useFilesSandbox();

describe("directories and entries", () => {
  it("lists names and types, one level by default and deeper with depth", async () => {
    const dir = fresh();
    await sandbox.files.write(join(dir, "a.txt"), "a");
    await sandbox.files.makeDir(join(dir, "sub"));
    await sandbox.files.write(join(dir, "sub", "b.txt"), "bb");

    const top = await sandbox.files.list(dir);
    expect(top.map((e) => [e.name, e.type, e.path]).sort()).toEqual([
      ["a.txt", FileType.FILE, join(dir, "a.txt")],
      ["sub", FileType.DIR, join(dir, "sub")],
    ]);
    expect(top.find((e) => e.name === "a.txt")!.size).toBe(1);

    const deep = await sandbox.files.list(dir, { depth: 2 });
    expect(deep.map((e) => e.path).sort()).toEqual([join(dir, "a.txt"), join(dir, "sub"), join(dir, "sub", "b.txt")]);
    expect(deep.find((e) => e.name === "b.txt")).toMatchObject({ type: FileType.FILE, size: 2 });
  });

  it("lists names that are not valid UTF-8 (with U+FFFD), as E2B's envd does, so no file can hide", async () => {
    const dir = fresh();
    // "bad-\xff.txt" and a directory "d\xfe" holding "in\xfd": bytes no UTF-8 name has.
    const raw = (...parts: (string | number[])[]) =>
      Buffer.concat([Buffer.from(dir), ...parts.map((p) => (typeof p === "string" ? Buffer.from(p) : Buffer.from(p)))]);
    writeFileSync(raw("/bad-", [0xff], ".txt"), "hidden?");
    mkdirSync(raw("/d", [0xfe]));
    writeFileSync(raw("/d", [0xfe], "/in", [0xfd]), "deeper");
    await sandbox.files.write(join(dir, "ok.txt"), "ok");

    const entries = await sandbox.files.list(dir, { depth: 2 });
    expect(entries.map((e) => [e.name, e.type, e.path])).toEqual([
      ["bad-\ufffd.txt", FileType.FILE, join(dir, "bad-\ufffd.txt")],
      ["d\ufffd", FileType.DIR, join(dir, "d\ufffd")],
      ["in\ufffd", FileType.FILE, join(dir, "d\ufffd", "in\ufffd")],
      ["ok.txt", FileType.FILE, join(dir, "ok.txt")],
    ]);
    expect(entries[0]!.size).toBe(7);
  });

  it("makeDir returns true when it creates the directory (with parents), false when it exists", async () => {
    const dir = fresh();
    const path = join(dir, "x", "y", "z");
    expect(await sandbox.files.makeDir(path)).toBe(true);
    expect((await sandbox.files.getInfo(path)).type).toBe(FileType.DIR);
    expect(await sandbox.files.makeDir(path)).toBe(false);
  });

  it("makeDir over an existing file fails with InvalidArgumentError", async () => {
    const dir = fresh();
    await sandbox.files.write(join(dir, "f"), "x");
    expect(await rejection(sandbox.files.makeDir(join(dir, "f")))).toBeInstanceOf(InvalidArgumentError);
  });

  it("renames files and directories, returning the new entry", async () => {
    const dir = fresh();
    await sandbox.files.write(join(dir, "old.txt"), "content");
    const moved = await sandbox.files.rename(join(dir, "old.txt"), join(dir, "new.txt"));
    expect(moved).toMatchObject({ name: "new.txt", path: join(dir, "new.txt"), type: FileType.FILE, size: 7 });
    expect(await sandbox.files.exists(join(dir, "old.txt"))).toBe(false);
    expect(await sandbox.files.read(join(dir, "new.txt"))).toBe("content");

    await sandbox.files.write(join(dir, "d1", "inner.txt"), "in");
    const movedDir = await sandbox.files.rename(join(dir, "d1"), join(dir, "d2"));
    expect(movedDir).toMatchObject({ name: "d2", type: FileType.DIR });
    expect(await sandbox.files.read(join(dir, "d2", "inner.txt"))).toBe("in");
  });

  it("rename replaces an existing destination file", async () => {
    const dir = fresh();
    await sandbox.files.write(join(dir, "src"), "new");
    await sandbox.files.write(join(dir, "dst"), "old");
    await sandbox.files.rename(join(dir, "src"), join(dir, "dst"));
    expect(await sandbox.files.read(join(dir, "dst"))).toBe("new");
  });

  it("removes files and whole directories; removing a missing path is not an error", async () => {
    const dir = fresh();
    await sandbox.files.write(join(dir, "f.txt"), "x");
    await sandbox.files.write(join(dir, "tree", "a", "b.txt"), "x");
    await sandbox.files.remove(join(dir, "f.txt"));
    await sandbox.files.remove(join(dir, "tree"));
    expect(await sandbox.files.exists(join(dir, "f.txt"))).toBe(false);
    expect(await sandbox.files.exists(join(dir, "tree"))).toBe(false);
    await expect(sandbox.files.remove(join(dir, "never-existed"))).resolves.toBeUndefined();
  });

  it("exists is true for files and directories, false for missing paths", async () => {
    const dir = fresh();
    await sandbox.files.write(join(dir, "here"), "x");
    expect(await sandbox.files.exists(join(dir, "here"))).toBe(true);
    expect(await sandbox.files.exists(dir)).toBe(true);
    expect(await sandbox.files.exists(join(dir, "not-here"))).toBe(false);
    expect(await sandbox.files.exists(join(dir, "not-here", "deeper"))).toBe(false);
  });

  it("getInfo describes a file: type, size, mode, permissions, owner, group, mtime", async () => {
    const dir = fresh();
    const path = join(dir, "info.txt");
    await sandbox.files.write(path, "12345");
    await sandbox.commands.run(`chmod 640 ${path}`);
    const info = await sandbox.files.getInfo(path);
    expect(info).toMatchObject({
      name: "info.txt",
      path,
      type: FileType.FILE,
      size: 5,
      mode: 0o640,
      permissions: "-rw-r-----",
      owner: "root",
      group: "root",
    });
    expect(info.symlinkTarget).toBeUndefined();
    expect(info.metadata).toBeUndefined();
    expect(info.modifiedTime).toBeInstanceOf(Date);
    expect(info.modifiedTime!.getTime()).toBe(Math.floor(statSync(path).mtimeMs));
  });

  it("getInfo describes a directory with the mode it was created with", async () => {
    const dir = fresh();
    const path = join(dir, "made");
    await sandbox.files.makeDir(path);
    const info = await sandbox.files.getInfo(path);
    const mode = parseInt((await sandbox.commands.run(`stat -c %a ${path}`)).stdout, 8);
    expect(info).toMatchObject({ name: "made", path, type: FileType.DIR, mode, owner: "root", group: "root" });
    expect(info.permissions).toMatch(/^d[rwx-]{9}$/);
  });

  it("getInfo of a symlink reports its resolved target", async () => {
    const dir = fresh();
    writeFileSync(join(dir, "target.txt"), "t");
    symlinkSync("target.txt", join(dir, "link"));
    const info = await sandbox.files.getInfo(join(dir, "link"));
    expect(info.name).toBe("link");
    expect(info.symlinkTarget).toBe(realpathSync(join(dir, "target.txt")));
    expect(info.permissions).toBe("Lrwxrwxrwx");
  });
});

describe("metadata", () => {
  it("stores metadata on write (keys lowercased) and returns it from getInfo and list", async () => {
    const dir = fresh();
    const path = join(dir, "meta.txt");
    const info = await sandbox.files.write(path, "m", { metadata: { Owner: "alice", "build-id": "42" } });
    const expected = { owner: "alice", "build-id": "42" };
    expect(info.metadata).toEqual(expected);
    expect((await sandbox.files.getInfo(path)).metadata).toEqual(expected);
    expect((await sandbox.files.list(dir)).find((e) => e.name === "meta.txt")!.metadata).toEqual(expected);
  });

  it("a later write replaces the metadata; a write without metadata clears it", async () => {
    const dir = fresh();
    const path = join(dir, "meta.txt");
    await sandbox.files.write(path, "1", { metadata: { a: "1", b: "2" } });
    await sandbox.files.write(path, "2", { metadata: { c: "3" } });
    expect((await sandbox.files.getInfo(path)).metadata).toEqual({ c: "3" });
    await sandbox.files.write(path, "3");
    expect((await sandbox.files.getInfo(path)).metadata).toBeUndefined();
  });

  it("applies metadata to every file of a multi-file and a streamed upload", async () => {
    const dir = fresh();
    const infos = await sandbox.files.write(
      [
        { path: join(dir, "x"), data: "x" },
        { path: join(dir, "y"), data: "y" },
      ],
      { metadata: { batch: "7" } },
    );
    expect(infos.map((i) => i.metadata)).toEqual([{ batch: "7" }, { batch: "7" }]);
    expect((await sandbox.files.getInfo(join(dir, "y"))).metadata).toEqual({ batch: "7" });

    const stream = new Blob(["streamed"]).stream();
    const s = await sandbox.files.write(join(dir, "s"), stream, { metadata: { kind: "stream" } });
    expect(s.metadata).toEqual({ kind: "stream" });
    expect((await sandbox.files.getInfo(join(dir, "s"))).metadata).toEqual({ kind: "stream" });
  });
});
