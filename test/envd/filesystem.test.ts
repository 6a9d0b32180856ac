// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import { Code } from "@connectrpc/connect";
import { setAttribute } from "@napi-rs/xattr";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { FileType } from "../../gen/ts/filesystem/filesystem_pb.js";
import { basicAuth, clients, PROTOCOLS } from "../helpers/envd.js";
import { envd, fresh, fs, rpcError, useTestEnvd } from "../helpers/fs-fixtures.js";

const root = { headers: basicAuth("root") };

useTestEnvd("case");

describe("every RPC over every protocol", () => {
  for (const protocol of PROTOCOLS) {
    it(`${protocol}: MakeDir, Stat, ListDir, Move, Remove`, async () => {
      const { fs } = clients(envd.url, protocol);
      const dir = fresh();
      const made = await fs.makeDir({ path: join(dir, "made") }, root);
      expect(made.entry?.type).toBe(FileType.DIRECTORY);
      expect(made.entry?.path).toBe(join(dir, "made"));
      writeFileSync(join(dir, "made", "f.txt"), "hello");

      const st = await fs.stat({ path: join(dir, "made", "f.txt") }, root);
      expect(st.entry?.size).toBe(5n);
      expect(st.entry?.type).toBe(FileType.FILE);

      const list = await fs.listDir({ path: dir, depth: 2 }, root);
      expect(list.entries.map((e) => e.path)).toEqual([join(dir, "made"), join(dir, "made", "f.txt")]);

      const moved = await fs.move({ source: join(dir, "made", "f.txt"), destination: join(dir, "g.txt") }, root);
      expect(moved.entry?.name).toBe("g.txt");
      expect(readFileSync(join(dir, "g.txt"), "utf8")).toBe("hello");

      await fs.remove({ path: join(dir, "made") }, root);
      expect(existsSync(join(dir, "made"))).toBe(false);

      const missing = await rpcError(fs.stat({ path: join(dir, "made") }, root));
      expect(missing.code).toBe(Code.NotFound);
    });
  }
});

describe("Connect JSON wire shape (what the SDKs parse)", () => {
  async function post(method: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
    const res = await fetch(`${envd.url}/filesystem.Filesystem/${method}`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1", ...basicAuth("root") },
      body: JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  }

  it("encodes EntryInfo in canonical proto3 JSON and errors with string codes", async () => {
    const file = join(fresh(), "wire.txt");
    writeFileSync(file, "hello");
    chmodSync(file, 0o644);
    const ok = await post("Stat", { path: file });
    expect(ok.status).toBe(200);
    const entry = ok.json.entry as Record<string, unknown>;
    expect(entry).toMatchObject({ name: "wire.txt", type: "FILE_TYPE_FILE", path: file, size: "5", mode: 420, permissions: "-rw-r--r--", owner: "root", group: "root" });
    expect(entry.modifiedTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    expect(entry).not.toHaveProperty("symlinkTarget");
    const missing = await post("Stat", { path: `${file}.nope` });
    expect(missing.status).toBe(404);
    expect(missing.json).toEqual({ code: "not_found", message: `file not found: ${file}.nope` });
    // Original proto field names are accepted too (the Python SDK's JSON writer may use them).
    const snake = await post("CreateWatcher", { path: join(file, ".."), include_entry: true, allow_network_mounts: false });
    expect(snake.json.watcherId).toMatch(/^w[a-z0-9]{20}$/);
    expect((await post("RemoveWatcher", { watcher_id: snake.json.watcherId })).status).toBe(200);
  });
});

describe("Stat and EntryInfo", () => {
  it("describes a regular file exactly", async () => {
    const dir = fresh();
    const file = join(dir, "file.txt");
    writeFileSync(file, "hello");
    chmodSync(file, 0o644);
    utimesSync(file, 1_700_000_000.25, 1_700_000_000.25);
    await setAttribute(file, "user.e2b.purpose", "testing");
    await setAttribute(file, "user.other", "ignored");

    const { entry } = await fs.stat({ path: file }, root);
    const st = lstatSync(file, { bigint: true });
    expect(entry).toBeDefined();
    expect(entry!.name).toBe("file.txt");
    expect(entry!.path).toBe(file);
    expect(entry!.type).toBe(FileType.FILE);
    expect(entry!.size).toBe(5n);
    expect(entry!.mode).toBe(420);
    expect(entry!.permissions).toBe("-rw-r--r--");
    expect(entry!.owner).toBe("root");
    expect(entry!.group).toBe("root");
    expect(entry!.modifiedTime?.seconds).toBe(1_700_000_000n);
    expect(entry!.modifiedTime?.seconds).toBe(st.mtimeNs / 1_000_000_000n);
    expect(entry!.modifiedTime?.nanos).toBe(Number(st.mtimeNs % 1_000_000_000n));
    expect(entry!.modifiedTime?.nanos).toBeGreaterThan(0);
    expect(entry!.symlinkTarget).toBeUndefined();
    expect(entry!.metadata).toEqual({ purpose: "testing" });
  });

  it("describes directories, special permission bits and symlinks like envd", async () => {
    const dir = fresh();
    const sub = join(dir, "sub");
    mkdirSync(sub);
    chmodSync(sub, 0o755);
    const sticky = join(dir, "sticky");
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    const suid = join(dir, "suid");
    writeFileSync(suid, "#!/bin/sh\n");
    chmodSync(suid, 0o4755);
    const secret = join(dir, "secret");
    writeFileSync(secret, "s");
    chmodSync(secret, 0o600);
    symlinkSync(sub, join(dir, "to-dir"));
    symlinkSync("secret", join(dir, "to-file"));
    symlinkSync(join(dir, "nowhere"), join(dir, "dangling"));

    const d = (await fs.stat({ path: sub }, root)).entry!;
    expect([d.type, d.mode, d.permissions, d.size]).toEqual([FileType.DIRECTORY, 0o755, "drwxr-xr-x", BigInt(statSync(sub).size)]);
    expect((await fs.stat({ path: sticky }, root)).entry!.permissions).toBe("dtrwxrwxrwx");
    const s = (await fs.stat({ path: suid }, root)).entry!;
    expect([s.permissions, s.mode]).toEqual(["urwxr-xr-x", 0o755]);

    const toDir = (await fs.stat({ path: join(dir, "to-dir") }, root)).entry!;
    expect(toDir.type).toBe(FileType.DIRECTORY);
    expect(toDir.symlinkTarget).toBe(realpathSync(sub));
    expect(toDir.permissions).toBe("Lrwxrwxrwx");
    expect(toDir.mode).toBe(0o755);
    expect(toDir.path).toBe(join(dir, "to-dir"));
    expect(toDir.size).toBe(BigInt(lstatSync(join(dir, "to-dir")).size));

    const toFile = (await fs.stat({ path: join(dir, "to-file") }, root)).entry!;
    expect([toFile.type, toFile.mode, toFile.symlinkTarget]).toEqual([FileType.FILE, 0o600, realpathSync(secret)]);

    const dangling = (await fs.stat({ path: join(dir, "dangling") }, root)).entry!;
    expect(dangling.type).toBe(FileType.UNSPECIFIED);
    expect(dangling.permissions).toBe("Lrwxrwxrwx");
  });

  it("reports a missing path as not_found with the path in the message", async () => {
    const missing = join(fresh(), "missing");
    const err = await rpcError(fs.stat({ path: missing }, root));
    expect(err.code).toBe(Code.NotFound);
    expect(err.rawMessage).toBe(`file not found: ${missing}`);
  });
});

describe("path resolution and users", () => {
  it("resolves ~/x, relative and empty paths against the user's home", async () => {
    const name = `locale2b-fs-test-${randomBytes(6).toString("hex")}`;
    const inHome = join("/root", name);
    try {
      const made = await fs.makeDir({ path: `~/${name}` }, root);
      expect(made.entry?.path).toBe(inHome);
      expect(statSync(inHome).isDirectory()).toBe(true);
      writeFileSync(join(inHome, "a.txt"), "x");
      const rel = await fs.stat({ path: `${name}/a.txt` }, root);
      expect(rel.entry?.path).toBe(join(inHome, "a.txt"));
      const home = await fs.stat({ path: "" }, root);
      expect(home.entry?.path).toBe("/root");
      const list = await fs.listDir({ path: `~/${name}` }, root);
      expect(list.entries.map((e) => e.path)).toEqual([join(inHome, "a.txt")]);
    } finally {
      rmSync(inHome, { recursive: true, force: true });
    }
    expect(existsSync(inHome)).toBe(false);
  });

  it("refuses ~otheruser with invalid_argument", async () => {
    const err = await rpcError(fs.stat({ path: "~nobody/x" }, root));
    expect(err.code).toBe(Code.InvalidArgument);
  });

  it("refuses an unknown Basic-auth user with unauthenticated", async () => {
    const err = await rpcError(fs.stat({ path: envd.dir }, { headers: basicAuth("no-such-user-xyz") }));
    expect(err.code).toBe(Code.Unauthenticated);
  });
});
