// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import { Code } from "@connectrpc/connect";
import { chmodSync, existsSync, mkdirSync, readFileSync, realpathSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { FileType } from "../../gen/ts/filesystem/filesystem_pb.js";
import { basicAuth } from "../helpers/envd.js";
import { fresh, fs, rpcError, useTestEnvd } from "../helpers/fs-fixtures.js";

const root = { headers: basicAuth("root") };

useTestEnvd("case");

describe("ListDir", () => {
  function tree(): string {
    const dir = fresh();
    mkdirSync(join(dir, "a", "deep", "deeper"), { recursive: true });
    writeFileSync(join(dir, "a", "inner.txt"), "1");
    writeFileSync(join(dir, "a", "deep", "d.txt"), "2");
    writeFileSync(join(dir, "b.txt"), "3");
    writeFileSync(join(dir, "B.txt"), "4");
    symlinkSync(join(dir, "a"), join(dir, "c-link"));
    return dir;
  }

  it("lists depth 1 in lexical order, depth 0 meaning 1", async () => {
    const dir = tree();
    for (const depth of [0, 1]) {
      const { entries } = await fs.listDir({ path: dir, depth }, root);
      expect(entries.map((e) => e.name)).toEqual(["B.txt", "a", "b.txt", "c-link"]);
    }
    const { entries } = await fs.listDir({ path: dir, depth: 1 }, root);
    const slashed = await fs.listDir({ path: `${dir}/`, depth: 1 }, root);
    expect(slashed.entries.map((e) => e.path)).toEqual(entries.map((e) => e.path));
    expect((await fs.stat({ path: `${dir}/a/` }, root)).entry).toMatchObject({ name: "a", path: join(dir, "a") });
    const link = entries.find((e) => e.name === "c-link")!;
    expect(link.type).toBe(FileType.DIRECTORY);
    expect(link.symlinkTarget).toBe(realpathSync(join(dir, "a")));
    expect(entries.find((e) => e.name === "b.txt")!.size).toBe(1n);
  });

  it("walks depth-first to depth 2 without following symlinked directories", async () => {
    const dir = tree();
    const { entries } = await fs.listDir({ path: dir, depth: 2 }, root);
    expect(entries.map((e) => e.path)).toEqual([
      join(dir, "B.txt"),
      join(dir, "a"),
      join(dir, "a", "deep"),
      join(dir, "a", "inner.txt"),
      join(dir, "b.txt"),
      join(dir, "c-link"),
    ]);
    const deep = await fs.listDir({ path: dir, depth: 3 }, root);
    expect(deep.entries.map((e) => e.path)).toContain(join(dir, "a", "deep", "d.txt"));
    expect(deep.entries.map((e) => e.path)).not.toContain(join(dir, "a", "deep", "deeper", "x"));
  });

  it("lists a symlinked directory under the requested path", async () => {
    const dir = tree();
    const { entries } = await fs.listDir({ path: join(dir, "c-link"), depth: 1 }, root);
    expect(entries.map((e) => e.path)).toEqual([join(dir, "c-link", "deep"), join(dir, "c-link", "inner.txt")]);
  });

  it("maps errors: missing → not_found, file → invalid_argument, symlink cycle → failed_precondition", async () => {
    const dir = tree();
    expect((await rpcError(fs.listDir({ path: join(dir, "nope") }, root))).code).toBe(Code.NotFound);
    expect((await rpcError(fs.listDir({ path: join(dir, "b.txt") }, root))).code).toBe(Code.InvalidArgument);
    symlinkSync(join(dir, "loop2"), join(dir, "loop1"));
    symlinkSync(join(dir, "loop1"), join(dir, "loop2"));
    const cycle = await rpcError(fs.listDir({ path: join(dir, "loop1") }, root));
    expect(cycle.code).toBe(Code.FailedPrecondition);
    expect(cycle.rawMessage).toContain(join(dir, "loop1"));
    symlinkSync(join(dir, "gone"), join(dir, "dangling"));
    expect((await rpcError(fs.listDir({ path: join(dir, "dangling") }, root))).code).toBe(Code.NotFound);
  });
});

describe("MakeDir, Move, Remove", () => {
  it("creates parents as 0755 directories owned by the calling user; none where the user may not write", async () => {
    const dir = fresh();
    const target = join(dir, "p", "q");
    // In a directory of root's (0755) nobody may create nothing: permission_denied, and nothing made.
    const refused = await rpcError(fs.makeDir({ path: target }, { headers: basicAuth("nobody") }));
    expect(refused.code).toBe(Code.PermissionDenied);
    expect(refused.rawMessage).toMatch(/permission denied: user 'nobody' cannot create/);
    expect(existsSync(join(dir, "p"))).toBe(false);
    chmodSync(dir, 0o777);
    const { entry } = await fs.makeDir({ path: target }, { headers: basicAuth("nobody") });
    expect(entry?.type).toBe(FileType.DIRECTORY);
    expect(entry?.name).toBe("q");
    expect(entry?.owner).toBe("nobody");
    for (const d of [join(dir, "p"), target]) {
      const st = statSync(d);
      expect(st.mode & 0o7777).toBe(0o755);
      expect(st.uid).toBe(65534);
    }
    expect(statSync(dir).uid).toBe(0);
  });

  it("refuses existing directories and files", async () => {
    const dir = fresh();
    const exists = await rpcError(fs.makeDir({ path: dir }, root));
    expect(exists.code).toBe(Code.AlreadyExists);
    expect(exists.rawMessage).toContain(dir);
    writeFileSync(join(dir, "f"), "");
    expect((await rpcError(fs.makeDir({ path: join(dir, "f") }, root))).code).toBe(Code.InvalidArgument);
    expect((await rpcError(fs.makeDir({ path: join(dir, "f", "below") }, root))).code).toBe(Code.Internal);
  });

  it("moves into new parent directories and returns the new entry", async () => {
    const dir = fresh();
    writeFileSync(join(dir, "src.txt"), "payload");
    const dest = join(dir, "x", "y", "dest.txt");
    const { entry } = await fs.move({ source: join(dir, "src.txt"), destination: dest }, root);
    expect(entry?.path).toBe(dest);
    expect(entry?.name).toBe("dest.txt");
    expect(entry?.size).toBe(7n);
    expect(entry?.type).toBe(FileType.FILE);
    expect(readFileSync(dest, "utf8")).toBe("payload");
    expect(existsSync(join(dir, "src.txt"))).toBe(false);
    expect(statSync(join(dir, "x")).mode & 0o777).toBe(0o755);
  });

  it("reports a missing move source as not_found", async () => {
    const dir = fresh();
    const err = await rpcError(fs.move({ source: join(dir, "nope"), destination: join(dir, "d") }, root));
    expect(err.code).toBe(Code.NotFound);
    expect(err.rawMessage).toContain(join(dir, "nope"));
    expect(existsSync(join(dir, "d"))).toBe(false);
  });

  it("removes trees and symlinks (not their targets); a missing path is fine", async () => {
    const dir = fresh();
    mkdirSync(join(dir, "t", "u"), { recursive: true });
    writeFileSync(join(dir, "t", "u", "f"), "1");
    writeFileSync(join(dir, "keep"), "1");
    symlinkSync(join(dir, "keep"), join(dir, "link"));
    await fs.remove({ path: join(dir, "t") }, root);
    expect(existsSync(join(dir, "t"))).toBe(false);
    await fs.remove({ path: join(dir, "link") }, root);
    expect(existsSync(join(dir, "link"))).toBe(false);
    expect(readFileSync(join(dir, "keep"), "utf8")).toBe("1");
    await expect(fs.remove({ path: join(dir, "never-existed") }, root)).resolves.toBeDefined();
  });
});
