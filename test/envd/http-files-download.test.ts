// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// GET /files against a real envd: identity and gzip, ranges, conditional requests, names, errors.
import { createHash, randomBytes } from "node:crypto";
import { statSync, utimesSync, writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { beforeAll, describe, expect, it } from "vitest";
import { call, expectError, files, fresh, fx, MiB, readSlowly, useFilesEnvd } from "../helpers/http-files.js";

useFilesEnvd();

describe("GET /files", () => {
  let dir: string;
  const content = Buffer.from("0123456789abcdefghij");
  beforeAll(() => {
    dir = fresh();
    writeFileSync(join(dir, "f.txt"), content);
    writeFileSync(join(dir, "ünï cödé.bin"), "u");
    writeFileSync(join(dir, "with space.txt"), "s");
    writeFileSync(join(dir, "empty"), "");
  });
  const get = (name: string, headers: Record<string, string> = {}, method = "GET") =>
    call(method, files({ path: join(dir, name) }), headers);

  it("serves identity with length, type, disposition, Vary and Last-Modified when gzip is not accepted", async () => {
    const res = await get("f.txt");
    expect(res.status).toBe(200);
    expect(res.body).toEqual(content);
    expect(res.headers["content-length"]).toBe(String(content.length));
    expect(res.headers["content-type"]).toBe("text/plain; charset=utf-8");
    expect(res.headers["content-disposition"]).toBe("inline; filename=f.txt");
    expect(res.headers.vary).toBe("Accept-Encoding");
    expect(Date.parse(res.headers["last-modified"]!)).toBe(Math.floor(statSync(join(dir, "f.txt")).mtimeMs / 1000) * 1000);
    expect(res.headers["content-encoding"]).toBeUndefined();
    expect((await get("empty")).body.length).toBe(0);
  });

  it("gzips when the client accepts it, without Content-Length", async () => {
    const res = await get("f.txt", { "accept-encoding": "gzip, deflate" });
    expect(res.status).toBe(200);
    expect(res.headers["content-encoding"]).toBe("gzip");
    expect(res.headers["content-length"]).toBeUndefined();
    expect(gunzipSync(res.body)).toEqual(content);
  });

  it("encodes awkward file names in Content-Disposition", async () => {
    expect((await get("with space.txt")).headers["content-disposition"]).toBe('inline; filename="with space.txt"');
    expect((await get("ünï cödé.bin")).headers["content-disposition"]).toBe(
      `inline; filename*=utf-8''${encodeURIComponent("ünï cödé.bin")}`,
    );
    expect((await get("ünï cödé.bin")).headers["content-type"]).toBe("application/octet-stream");
  });

  it("honours single byte ranges (206) over gzip, and answers 416 for unsatisfiable ones", async () => {
    for (const [range, start, end] of [["bytes=2-5", 2, 5], ["bytes=15-", 15, 19], ["bytes=-3", 17, 19], ["bytes=10-999", 10, 19]] as const) {
      const res = await get("f.txt", { range, "accept-encoding": "gzip" });
      expect(res.status).toBe(206);
      expect(res.headers["content-encoding"]).toBeUndefined();
      expect(res.headers["content-range"]).toBe(`bytes ${start}-${end}/${content.length}`);
      expect(res.body).toEqual(content.subarray(start, end + 1));
    }
    const res = await get("f.txt", { range: "bytes=50-60" });
    expectError(res, 416);
    expect(res.headers["content-range"]).toBe(`bytes */${content.length}`);
  });

  it("answers 304 to a current If-Modified-Since and 200 to an older one", async () => {
    const mtime = new Date("2024-05-01T10:00:00Z");
    utimesSync(join(dir, "f.txt"), mtime, mtime);
    const notModified = await get("f.txt", { "if-modified-since": mtime.toUTCString() });
    expect(notModified.status).toBe(304);
    expect(notModified.body.length).toBe(0);
    expect((await get("f.txt", { "if-modified-since": new Date("2024-04-30T00:00:00Z").toUTCString() })).status).toBe(200);
  });

  it("answers 406 when no supported encoding is acceptable", async () => {
    expectError(await get("f.txt", { "accept-encoding": "identity;q=0" }), 406, /no acceptable encoding/);
    expectError(await get("f.txt", { "accept-encoding": "br;q=1, *;q=0" }), 406);
    expect((await get("f.txt", { "accept-encoding": "br, identity;q=0.5" })).status).toBe(200);
  });

  it("supports HEAD with the same headers and no body", async () => {
    const res = await get("f.txt", {}, "HEAD");
    expect(res.status).toBe(200);
    expect(res.headers["content-length"]).toBe(String(content.length));
    expect(res.body.length).toBe(0);
  });

  it("answers 404 for missing paths, 400 for directories, 401 for unknown users", async () => {
    expectError(await get("missing.txt"), 404, `path '${join(dir, "missing.txt")}' does not exist`);
    expectError(await call("GET", files({ path: dir })), 400, `path '${dir}' is a directory`);
    expectError(await call("GET", files({ path: join(dir, "f.txt"), username: "ghost" })), 401, /error looking up user 'ghost'/);
  });

  describe("a file larger than envd's read buffers", () => {
    // Odd sizes, so reads end mid-buffer; envd reads 1 MiB at a time into two buffers it reuses.
    const big = randomBytes(5 * MiB + 12345);
    const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
    beforeAll(() => writeFileSync(join(dir, "big.bin"), big));

    it("arrives whole and in order, and so do ranges across buffer boundaries", async () => {
      const res = await get("big.bin");
      expect(res.status).toBe(200);
      expect(res.headers["content-length"]).toBe(String(big.length));
      expect(sha(res.body)).toBe(sha(big));
      for (const [start, end] of [[MiB - 7, 3 * MiB + 9], [256 * 1024 - 7, 2 * MiB + 1], [1, big.length - 2], [big.length - 300_000, big.length - 1]] as const) {
        const part = await get("big.bin", { range: `bytes=${start}-${end}` });
        expect(part.status).toBe(206);
        expect(sha(part.body)).toBe(sha(big.subarray(start, end + 1)));
      }
    });

    it("waits for a reader that pauses (back-pressure), and survives one that goes away", async () => {
      const slow = await readSlowly(files({ path: join(dir, "big.bin") }));
      expect(sha(slow)).toBe(sha(big));
      await new Promise<void>((resolve, reject) => {
        const req = http.get(fx.envd.url + files({ path: join(dir, "big.bin") }), (res) => {
          res.once("data", () => {
            req.destroy();
            resolve();
          });
        });
        req.on("error", () => undefined);
        req.setTimeout(10_000, () => reject(new Error("no data")));
      });
      const again = await get("big.bin");
      expect(sha(again.body)).toBe(sha(big));
    });
  });
});
