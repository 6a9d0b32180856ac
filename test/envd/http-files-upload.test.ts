// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// POST /files against a real envd: raw and multipart uploads, gzip, metadata, replacement in place, aborts, full disks.
import { getAttribute, listAttributes } from "@napi-rs/xattr";
import { createHash, randomBytes } from "node:crypto";
import { chownSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { AS_ROOT, call, expectError, expectUploaded, files, fresh, fx, json, MiB, multipart, octet, sha256File, temps, useFilesEnvd, waitFor, type Res } from "../helpers/http-files.js";

useFilesEnvd();

describe("POST /files", () => {
  it("writes an octet-stream body to a relative path under the user's home, owned by the user", async () => {
    const res = await call("POST", files({ path: "up/one.txt" }), octet, Buffer.from("hello octet"));
    expectUploaded(res, [join(fx.home, "up/one.txt")]);
    expect(json(res)).toEqual([{ path: join(fx.home, "up/one.txt"), name: "one.txt", type: "file" }]);
    expect(readFileSync(join(fx.home, "up/one.txt"), "utf8")).toBe("hello octet");
    if (AS_ROOT) {
      expect(statSync(join(fx.home, "up/one.txt")).uid).toBe(1000);
      expect(statSync(join(fx.home, "up")).uid).toBe(1000);
      expect(statSync(join(fx.home, "up")).mode & 0o777).toBe(0o755);
    }
    expect(temps(join(fx.home, "up"))).toEqual([]);
  });

  it("requires a path for octet-stream and a known content type", async () => {
    expectError(await call("POST", "/files", octet, Buffer.from("x")), 400, /path/);
    expectError(await call("POST", files({ path: "x" }), { "content-type": "text/plain" }, Buffer.from("x")), 400);
  });

  it("multipart via fetch + FormData: filenames are paths, relative or absolute, two files in one request", async () => {
    const dir = fresh();
    const form = new FormData();
    form.append("file", new Blob(["relative!"]), "rel/dir/x.txt");
    form.append("note", "a plain field is ignored");
    form.append("file", new Blob(["absolute!"]), join(dir, "abs/y.txt"));
    const r = await fetch(fx.envd.url + "/files", { method: "POST", body: form });
    const res: Res = { status: r.status, headers: Object.fromEntries(r.headers), body: Buffer.from(await r.arrayBuffer()) };
    expectUploaded(res, [join(fx.home, "rel/dir/x.txt"), join(dir, "abs/y.txt")]);
    expect(readFileSync(join(fx.home, "rel/dir/x.txt"), "utf8")).toBe("relative!");
    expect(readFileSync(join(dir, "abs/y.txt"), "utf8")).toBe("absolute!");
  });

  it("many files into new folders in one multipart upload: every part lands, the folders are the user's (parts race to create them)", async () => {
    // The parts are written concurrently: one part's folder is made (as root) and then given to the user while
    // another part checks whether the user may write there. That check must never see the folder half made.
    // Parts of some KiB: they arrive over several reads, so later parts are checked while earlier ones make folders.
    const body = (i: number) => `content ${i} `.padEnd(6000, "x");
    for (let round = 0; round < 10; round++) {
      const form = new FormData();
      const paths: string[] = [];
      for (let i = 0; i < 32; i++) {
        const rel = `race${round}/r${i % 8}/deeper/file-${i}.txt`;
        paths.push(join(fx.home, rel));
        form.append("file", new Blob([body(i)]), rel);
      }
      const r = await fetch(fx.envd.url + "/files", { method: "POST", body: form });
      const res: Res = { status: r.status, headers: Object.fromEntries(r.headers), body: Buffer.from(await r.arrayBuffer()) };
      expectUploaded(res, paths);
      for (const [i, p] of paths.entries()) expect(readFileSync(p, "utf8")).toBe(body(i));
      if (AS_ROOT) {
        for (let d = 0; d < 8; d++) {
          expect(statSync(join(fx.home, `race${round}/r${d}`)).uid).toBe(1000);
          expect(statSync(join(fx.home, `race${round}/r${d}/deeper`)).uid).toBe(1000);
        }
      }
    }
  });

  it("multipart with a path query writes there; a second file part to the same path is a 400 and writes nothing", async () => {
    const dir = fresh();
    const one = multipart([{ filename: "ignored.txt", data: "via path" }]);
    expectUploaded(await call("POST", files({ path: join(dir, "p.txt") }), { "content-type": one.type }, one.body), [join(dir, "p.txt")]);
    expect(readFileSync(join(dir, "p.txt"), "utf8")).toBe("via path");

    const two = multipart([{ filename: "a", data: "A" }, { filename: "b", data: "B" }]);
    expectError(await call("POST", files({ path: join(dir, "q.txt") }), { "content-type": two.type }, two.body), 400, /more than one/);
    expect(readdirSync(dir)).toEqual(["p.txt"]);
  });

  it("a 'file' part without a filename (FormData string) is written to the path query, as E2B's envd does", async () => {
    const dir = fresh();
    const post = async (path: string, form: FormData): Promise<Res> => {
      const r = await fetch(fx.envd.url + path, { method: "POST", body: form });
      return { status: r.status, headers: Object.fromEntries(r.headers), body: Buffer.from(await r.arrayBuffer()) };
    };
    const form = new FormData();
    form.append("file", "text from a string field, é ✓");
    expectUploaded(await post(files({ path: join(dir, "s.txt") }), form), [join(dir, "s.txt")]);
    expect(readFileSync(join(dir, "s.txt"), "utf8")).toBe("text from a string field, é ✓");
    // Without a path there is nowhere to put it (E2B's envd resolves "" to the home directory: a 400 too).
    expectError(await post("/files", form), 400, /no filename and no 'path' query parameter.*add \?path=/);
    // Held in memory, so bounded: a larger one must be sent with a filename (streamed).
    const big = new FormData();
    big.append("file", "x".repeat(16 * 1024 * 1024 + 1));
    expectError(await post(files({ path: join(dir, "big.txt") }), big), 413, /give the part a filename/);
    expect(readdirSync(dir)).toEqual(["s.txt"]);
  });

  it("rejects multipart forms without file parts, without boundary, or truncated, leaving nothing behind", async () => {
    const dir = fresh();
    const none = multipart([{ name: "other", filename: join(dir, "o.txt"), data: "x" }]);
    expectError(await call("POST", "/files", { "content-type": none.type }, none.body), 400, /no file part/);
    expectError(await call("POST", "/files", { "content-type": "multipart/form-data" }, Buffer.from("x")), 400);
    const full = multipart([{ filename: join(dir, "t1.txt"), data: "complete" }, { filename: join(dir, "t2.txt"), data: "cut" }]);
    const cut = full.body.subarray(0, full.body.length - 20);
    expectError(await call("POST", "/files", { "content-type": full.type }, cut), 400, /multipart/);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("gunzips a Content-Encoding: gzip body; other encodings and corrupt gzip are 400s", async () => {
    const dir = fresh();
    const data = Buffer.from("compressible ".repeat(1000));
    expectUploaded(await call("POST", files({ path: join(dir, "z.txt") }), { ...octet, "content-encoding": "gzip" }, gzipSync(data)), [join(dir, "z.txt")]);
    expect(readFileSync(join(dir, "z.txt"))).toEqual(data);
    expectError(await call("POST", files({ path: join(dir, "br.txt") }), { ...octet, "content-encoding": "br" }, data), 400, /Content-Encoding/);
    const corrupt = gzipSync(data).subarray(0, 40);
    expectError(await call("POST", files({ path: join(dir, "bad.txt") }), { ...octet, "content-encoding": "gzip" }, corrupt), 400, /gzip/);
    expect(readdirSync(dir)).toEqual(["z.txt"]);
  });

  it("replaces an existing file, writes through a symlink, and refuses a directory", async () => {
    const dir = fresh();
    writeFileSync(join(dir, "old.txt"), "old content that is longer");
    if (AS_ROOT) {
      // A file of root's is not the user's to replace: 403, and it keeps its content.
      expectError(await call("POST", files({ path: join(dir, "old.txt") }), octet, Buffer.from("new")), 403, /permission denied: user 'user' cannot write/);
      expect(readFileSync(join(dir, "old.txt"), "utf8")).toBe("old content that is longer");
      chownSync(join(dir, "old.txt"), 1000, 1000);
    }
    expectUploaded(await call("POST", files({ path: join(dir, "old.txt") }), octet, Buffer.from("new")), [join(dir, "old.txt")]);
    expect(readFileSync(join(dir, "old.txt"), "utf8")).toBe("new");
    writeFileSync(join(dir, "target.txt"), "t");
    if (AS_ROOT) chownSync(join(dir, "target.txt"), 1000, 1000);
    symlinkSync(join(dir, "target.txt"), join(dir, "link.txt"));
    expectUploaded(await call("POST", files({ path: join(dir, "link.txt") }), octet, Buffer.from("via link")), [join(dir, "link.txt")]);
    expect(lstatSync(join(dir, "link.txt")).isSymbolicLink()).toBe(true);
    expect(readFileSync(join(dir, "target.txt"), "utf8")).toBe("via link");
    mkdirSync(join(dir, "sub"));
    expectError(await call("POST", files({ path: join(dir, "sub") }), octet, Buffer.from("x")), 400, `path '${join(dir, "sub")}' is a directory`);
  });

  it("stores X-Metadata-* headers as user.e2b.* xattrs, replaces them per upload, and rejects bad metadata", async () => {
    const dir = fresh();
    const path = join(dir, "meta.txt");
    const res = await call("POST", files({ path }), { ...octet, "X-Metadata-Foo": "bar", "X-Metadata-Other-Key": "v 1" }, Buffer.from("m"));
    expectUploaded(res, [path]);
    expect((json(res) as { metadata?: unknown }[])[0]!.metadata).toEqual({ foo: "bar", "other-key": "v 1" });
    expect((await listAttributes(path)).filter((a) => a.startsWith("user.e2b.")).sort()).toEqual(["user.e2b.foo", "user.e2b.other-key"]);
    expect((await getAttribute(path, "user.e2b.foo"))?.toString()).toBe("bar");

    expectUploaded(await call("POST", files({ path }), octet, Buffer.from("m2")), [path]);
    expect((await listAttributes(path)).filter((a) => a.startsWith("user.e2b."))).toEqual([]);

    const bad = join(dir, "bad.txt");
    const tooMany: Record<string, string> = {};
    for (let i = 0; i < 20; i++) tooMany[`X-Metadata-k${i}`] = "v".repeat(250);
    for (const headers of [{ "X-Metadata-Name": "caf\xe9" }, { [`X-Metadata-${"k".repeat(247)}`]: "v" }, tooMany]) {
      expectError(await call("POST", files({ path: bad }), { ...octet, ...headers }, Buffer.from("x")), 400, /metadata/);
    }
    expect(existsSync(bad)).toBe(false);
  });

  it("answers 401 for an unknown user and 400 for ~otheruser paths", async () => {
    expectError(await call("POST", files({ path: "x", username: "nobody-here" }), octet, Buffer.from("x")), 401, "error looking up user 'nobody-here'");
    expectError(await call("POST", files({ path: "~root/x" }), octet, Buffer.from("x")), 400);
  });

  it("an octet-stream upload aborted mid-body leaves neither file nor temp file, and envd keeps serving", async () => {
    const dir = fresh();
    const dest = join(dir, "aborted.bin");
    const req = http.request(fx.envd.url + files({ path: dest }), { method: "POST", headers: { ...octet, "content-length": String(64 * MiB) } });
    req.on("error", () => undefined);
    req.write(randomBytes(MiB));
    // A new file is written in place (as E2B's envd does) and removed when the upload fails.
    await waitFor(() => readdirSync(dir).length === 1, "the upload's file appears");
    req.destroy();
    await waitFor(() => readdirSync(dir).length === 0, "the partial file is removed");
    expectUploaded(await call("POST", files({ path: dest }), octet, Buffer.from("after")), [dest]);
  });

  it("replaces an existing file in place only when the upload is complete; an aborted one keeps the old content", async () => {
    const dir = fresh();
    const staging = fresh();
    process.env.LOCALE2B_ENVD_STAGING_DIR = staging;
    try {
      const dest = join(dir, "keep.txt");
      expectUploaded(await call("POST", files({ path: dest }), octet, Buffer.from("old content")), [dest]);
      const inode = statSync(dest).ino;
      const req = http.request(fx.envd.url + files({ path: dest }), { method: "POST", headers: { ...octet, "content-length": String(64 * MiB) } });
      req.on("error", () => undefined);
      req.write(randomBytes(MiB));
      await waitFor(() => readdirSync(staging).length === 1, "the replacement is staged outside the directory");
      expect(readdirSync(dir)).toEqual(["keep.txt"]);
      req.destroy();
      await waitFor(() => readdirSync(staging).length === 0, "the staged file is removed");
      expect(readFileSync(dest, "utf8")).toBe("old content");
      expectUploaded(await call("POST", files({ path: dest }), octet, Buffer.from("new")), [dest]);
      expect(readFileSync(dest, "utf8")).toBe("new");
      expect(statSync(dest).ino).toBe(inode); // same file: hard links and open readers follow
      expect(readdirSync(staging)).toEqual([]);
    } finally {
      delete process.env.LOCALE2B_ENVD_STAGING_DIR;
    }
  });

  it("a multipart upload aborted in its second file commits neither file", async () => {
    const dir = fresh();
    const boundary = "abortboundary";
    const req = http.request(fx.envd.url + "/files", { method: "POST", headers: { "content-type": `multipart/form-data; boundary=${boundary}` } });
    req.on("error", () => undefined);
    const part = (name: string) => `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${join(dir, name)}"\r\n\r\n`;
    req.write(part("first.txt") + "first complete\r\n");
    req.write(part("second.bin"));
    req.write(randomBytes(MiB));
    await waitFor(() => readdirSync(dir).length === 2, "both files appear");
    req.destroy();
    await waitFor(() => readdirSync(dir).length === 0, "both partial files are removed");
    expect(readdirSync(dir)).toEqual([]);
  });

  it("returns 507 when the disk is full, leaving no temp file (tmpfs; needs root)", async (t) => {
    const mnt = fresh();
    try {
      const { execFileSync } = await import("node:child_process");
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], { stdio: "ignore" });
    } catch {
      t.skip();
      return;
    }
    try {
      expectError(await call("POST", files({ path: join(mnt, "big.bin") }), octet, randomBytes(3 * MiB)), 507, "not enough disk space available");
      expect(readdirSync(mnt)).toEqual([]);
    } finally {
      const { execFileSync } = await import("node:child_process");
      execFileSync("umount", [mnt]);
    }
  });

  it("streams a 48 MiB octet-stream body of uneven chunks, some late, to disk intact, in order", async () => {
    const dir = fresh();
    const dest = join(dir, "raw.bin");
    const h = createHash("sha256");
    let size = 0;
    async function* body() {
      // 1 byte to 3 MiB pieces, with pauses, so writes and reads interleave every way.
      for (const piece of [1, 7, 65536, 65537, 3 * MiB, 100, MiB - 1, 5]) {
        for (let i = 0; i < 4; i++) {
          const chunk = randomBytes(piece);
          h.update(chunk);
          size += piece;
          yield chunk;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      for (let i = 0; i < 32; i++) {
        const chunk = randomBytes(MiB);
        h.update(chunk);
        size += MiB;
        yield chunk;
      }
    }
    expectUploaded(await call("POST", files({ path: dest }), octet, Readable.from(body())), [dest]);
    expect(statSync(dest).size).toBe(size);
    expect(await sha256File(dest)).toBe(h.digest("hex"));
  });

  it("streams a 64 MiB two-file multipart upload to disk intact and downloads it back (identity and gzip)", async () => {
    const dir = fresh();
    const sizes = { "big1.bin": 40 * MiB, "big2.bin": 24 * MiB };
    const sent: Record<string, string> = {};
    const boundary = "bigboundary0123456789";
    async function* body() {
      for (const [name, size] of Object.entries(sizes)) {
        yield Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${join(dir, name)}"\r\n\r\n`);
        const h = createHash("sha256");
        for (let left = size; left > 0; left -= MiB) {
          const chunk = randomBytes(Math.min(MiB, left));
          h.update(chunk);
          yield chunk;
        }
        sent[name] = h.digest("hex");
        yield Buffer.from("\r\n");
      }
      yield Buffer.from(`--${boundary}--\r\n`);
    }
    const res = await call("POST", "/files", { "content-type": `multipart/form-data; boundary=${boundary}` }, Readable.from(body()));
    expectUploaded(res, [join(dir, "big1.bin"), join(dir, "big2.bin")]);
    expect(await sha256File(join(dir, "big1.bin"))).toBe(sent["big1.bin"]);
    expect(await sha256File(join(dir, "big2.bin"))).toBe(sent["big2.bin"]);

    for (const [name, gzip] of [["big1.bin", false], ["big2.bin", true]] as const) {
      const got = await new Promise<string>((resolve, reject) => {
        http.get(fx.envd.url + files({ path: join(dir, name) }), { headers: { "accept-encoding": gzip ? "gzip" : "identity" } }, (r) => {
          expect(r.headers["content-encoding"]).toBe(gzip ? "gzip" : undefined);
          const h = createHash("sha256");
          (gzip ? pipeline(r, createGunzip(), h) : pipeline(r, h)).then(() => resolve(h.digest("hex")), reject);
        }).on("error", reject);
      });
      expect(got).toBe(sent[name]);
    }
  });
});
