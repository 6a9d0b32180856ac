// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// GET /files of a large file as envd serves it in a sandbox: with sendfile(2)
// through the init binary (`locale2b-init --sendfile`, envd/http/file-sendfile.ts),
// the bytes never pass through envd. Whole files and ranges arrive intact,
// small ones are still copied by envd, a slow reader is waited for, and a
// reader that goes away leaves no sender behind.
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { ensureInitBinary } from "../../control-plane/images/guest-init.js";
import { imagesDir } from "../../control-plane/images/layout.js";
import { SENDFILE_MIN_BYTES, zeroCopySends } from "../../envd/http/file-sendfile.js";
import { resetSpawnHelper } from "../../envd/process/handler/spawn-helper.js";
import { call, childrenWith, files, fresh, fx, MiB, readSlowly, useFilesEnvd } from "../helpers/http-files.js";

process.env.LOCALE2B_SPAWN_HELPER = await ensureInitBinary(imagesDir());
resetSpawnHelper();
useFilesEnvd();

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

const senders = () => childrenWith("--sendfile");

describe("GET /files with sendfile", () => {
  let dir: string;
  // Odd, past the threshold, so the last piece is short.
  const big = randomBytes(SENDFILE_MIN_BYTES + MiB + 12345);
  beforeAll(() => {
    dir = fresh();
    writeFileSync(join(dir, "big.bin"), big);
  });
  const get = (headers: Record<string, string> = {}, method = "GET") => call(method, files({ path: join(dir, "big.bin") }), headers);

  it("sends a large file and a large range with sendfile, a small range by copying, HEAD without a body", async () => {
    const before = zeroCopySends();
    const whole = await get();
    expect(whole.status).toBe(200);
    expect(whole.headers["content-length"]).toBe(String(big.length));
    expect(sha(whole.body)).toBe(sha(big));
    // The client may have every byte (the sender wrote them) before envd has seen the sender exit and counted it.
    await expect.poll(zeroCopySends).toBe(before + 1);

    const [start, end] = [12345, 12345 + SENDFILE_MIN_BYTES + 7];
    const part = await get({ range: `bytes=${start}-${end}` });
    expect(part.status).toBe(206);
    expect(part.headers["content-range"]).toBe(`bytes ${start}-${end}/${big.length}`);
    expect(sha(part.body)).toBe(sha(big.subarray(start, end + 1)));
    await expect.poll(zeroCopySends).toBe(before + 2);

    const small = await get({ range: "bytes=100-1000099" });
    expect(sha(small.body)).toBe(sha(big.subarray(100, 1000100)));
    expect(zeroCopySends()).toBe(before + 2);

    const head = await get({}, "HEAD");
    expect(head.headers["content-length"]).toBe(String(big.length));
    expect(head.body.length).toBe(0);
    expect(zeroCopySends()).toBe(before + 2);
    // Keep-alive goes on after a sendfile response: the next one on the same connection is whole too.
    const again = await get();
    expect(sha(again.body)).toBe(sha(big));
  });

  it("waits for a reader that pauses, and a reader that goes away leaves no sender behind", async () => {
    const slow = await readSlowly(files({ path: join(dir, "big.bin") }));
    expect(sha(slow)).toBe(sha(big));

    // A reader that stops reading (the sender blocks on a full socket), then goes away.
    await new Promise<void>((resolve, reject) => {
      const req = http.get(fx.envd.url + files({ path: join(dir, "big.bin") }), (res) => {
        res.once("data", () => {
          res.pause();
          expect.poll(senders).toHaveLength(1).then(() => {
            req.destroy();
            resolve();
          }, reject);
        });
      });
      req.on("error", () => undefined);
    });
    await expect.poll(senders, { timeout: 10_000 }).toEqual([]);
    const after = await get();
    expect(sha(after.body)).toBe(sha(big));
  });

  it("the sender copies only what it is given: a user cannot read through it what they cannot open", () => {
    const bin = process.env.LOCALE2B_SPAWN_HELPER!;
    writeFileSync(join(dir, "hello.txt"), "hello world");
    expect(execFileSync("sh", ["-c", `exec ${bin} --sendfile 6 5 < ${join(dir, "hello.txt")} | cat`]).toString()).toBe("world");
    if (process.getuid?.() !== 0) return;
    const r = (() => {
      try {
        execFileSync("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", `exec ${bin} --sendfile 0 10 < /etc/shadow`], { stdio: "pipe" });
        return "read it";
      } catch (e) {
        return String((e as { stderr?: Buffer }).stderr);
      }
    })();
    expect(r).toMatch(/Permission denied/);
  });
});
