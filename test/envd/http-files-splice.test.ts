// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// POST /files of a large body as envd receives it in a sandbox: with splice(2)
// through the init binary (`locale2b-init --receive`, envd/http/file-splice.ts),
// the bytes never pass through envd. Bodies arrive intact however the client
// sends them, small and chunked ones are still copied by envd, a client that
// goes away leaves neither file nor receiver behind, a full disk is a 507
// after the body was read, and a user cannot write through it where they may not.
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import { Readable } from "node:stream";
import { beforeAll, describe, expect, it } from "vitest";
import { ensureInitBinary } from "../../control-plane/images/guest-init.js";
import { imagesDir } from "../../control-plane/images/layout.js";
import { SPLICE_MIN_BYTES, zeroCopyReceives } from "../../envd/http/file-splice.js";
import { resetSpawnHelper } from "../../envd/process/handler/spawn-helper.js";
import { AS_ROOT, call, childrenWith, expectError, expectUploaded, files, fresh, fx, MiB, octet, sha256File, waitFor } from "../helpers/http-files.js";
import { useFilesEnvd } from "../helpers/http-files.js";

process.env.LOCALE2B_SPAWN_HELPER = await ensureInitBinary(imagesDir());
resetSpawnHelper();
useFilesEnvd();

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

const receivers = () => childrenWith("--receive");

/** `body` in pieces of 1 byte to 3 MiB with pauses between some, as a slow or bursty client sends. */
function uneven(body: Buffer): Readable {
  return Readable.from(
    (async function* () {
      const sizes = [1, 7, 65536, 65537, 3 * MiB, 100, MiB - 1, 5];
      let at = 0;
      for (let i = 0; at < body.length; i++) {
        const n = sizes[i % sizes.length]!;
        yield body.subarray(at, at + n);
        at += n;
        if (i % 3 === 0) await new Promise((r) => setTimeout(r, 10));
      }
    })(),
  );
}

describe("POST /files with splice", () => {
  // Odd, past the threshold, so the last piece is short.
  const big = randomBytes(SPLICE_MIN_BYTES + MiB + 12345);
  const bigSha = sha(big);
  let dir: string;
  beforeAll(() => {
    dir = fresh();
  });
  const post = (path: string, body: Buffer | Readable, headers: Record<string, string> = {}) =>
    call("POST", files({ path }), { ...octet, ...(Buffer.isBuffer(body) ? {} : { "content-length": String(big.length) }), ...headers }, body);

  it("receives a large body with splice, a small or chunked one by copying; the connection carries on after either", async () => {
    const before = zeroCopyReceives();
    const dest = join(dir, "big.bin");
    const res = await post(dest, big);
    expectUploaded(res, [dest]);
    expect(res.headers.connection).toBe("keep-alive");
    expect(await sha256File(dest)).toBe(bigSha);
    if (AS_ROOT) expect(statSync(dest).uid).toBe(1000); // owned by the user it was uploaded as
    expect(zeroCopyReceives()).toBe(before + 1);

    // Sent in uneven pieces with pauses: the receiver waits for each.
    const slow = join(dir, "slow.bin");
    expectUploaded(await post(slow, uneven(big)), [slow]);
    expect(await sha256File(slow)).toBe(bigSha);
    expect(zeroCopyReceives()).toBe(before + 2);

    // An existing file is replaced in place (same inode), through a staging file.
    const inode = statSync(dest).ino;
    const other = Buffer.from(big).reverse();
    expectUploaded(await post(dest, other), [dest]);
    expect(statSync(dest).ino).toBe(inode);
    expect(await sha256File(dest)).toBe(sha(other));
    expect(zeroCopyReceives()).toBe(before + 3);

    // Below the threshold, and without a Content-Length (chunked): copied by envd, keep-alive kept.
    const small = join(dir, "small.bin");
    const r = await post(small, big.subarray(0, MiB));
    expectUploaded(r, [small]);
    const chunked = join(dir, "chunked.bin");
    expectUploaded(await call("POST", files({ path: chunked }), octet, uneven(big)), [chunked]);
    expect(await sha256File(chunked)).toBe(bigSha);
    expect(zeroCopyReceives()).toBe(before + 3);
  });

  it("the connection a spliced body came on carries the next requests (keep-alive)", async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const before = zeroCopyReceives();
    const send = (method: string, path: string, body?: Buffer) =>
      new Promise<{ status: number; reused: boolean; body: string }>((resolve, reject) => {
        const req = http.request(fx.envd.url + path, { method, agent, headers: body ? { ...octet, "content-length": String(body.length) } : {} }, (res) => {
          let text = "";
          res.on("data", (c: Buffer) => (text += c.toString()));
          res.on("end", () => resolve({ status: res.statusCode!, reused: req.reusedSocket, body: text }));
        });
        req.once("error", reject);
        req.end(body);
      });
    try {
      const a = join(dir, "ka-a.bin");
      const b = join(dir, "ka-b.bin");
      expect(await send("POST", files({ path: a }), big)).toMatchObject({ status: 200, reused: false });
      expect(await send("GET", "/health")).toMatchObject({ status: 204, reused: true });
      expect(await send("POST", files({ path: b }), big)).toMatchObject({ status: 200, reused: true });
      expect(await send("GET", files({ path: join(dir, "slow.bin") }).replace("slow.bin", "none"))).toMatchObject({ status: 404, reused: true });
      expect(await sha256File(a)).toBe(bigSha);
      expect(await sha256File(b)).toBe(bigSha);
      expect(zeroCopyReceives()).toBe(before + 2);
    } finally {
      agent.destroy();
    }
  });

  it("answers an Expect: 100-continue upload", async () => {
    const dest = join(dir, "continue.bin");
    const before = zeroCopyReceives();
    const res = await new Promise<number>((resolve, reject) => {
      const req = http.request(fx.envd.url + files({ path: dest }), {
        method: "POST",
        headers: { ...octet, "content-length": String(big.length), expect: "100-continue" },
      });
      req.once("continue", () => req.end(big));
      req.once("response", (r) => {
        r.resume();
        r.once("end", () => resolve(r.statusCode!));
      });
      req.once("error", reject);
    });
    expect(res).toBe(200);
    expect(await sha256File(dest)).toBe(bigSha);
    expect(zeroCopyReceives()).toBe(before + 1);
  });

  it("a client that goes away mid-body leaves neither the file nor a receiver, and envd keeps serving", async () => {
    const sub = fresh();
    const dest = join(sub, "gone.bin");
    const req = http.request(fx.envd.url + files({ path: dest }), { method: "POST", headers: { ...octet, "content-length": String(big.length) } });
    req.on("error", () => undefined);
    req.write(big.subarray(0, 4 * MiB));
    await expect.poll(receivers, { timeout: 15_000 }).toHaveLength(1);
    req.destroy();
    await expect.poll(receivers, { timeout: 15_000 }).toEqual([]);
    await waitFor(() => readdirSync(sub).length === 0, "the partial file is removed");
    expectUploaded(await post(dest, big), [dest]);
    expect(await sha256File(dest)).toBe(bigSha);
  });

  it("a full disk is a 507 once the body was read, leaving no file (tmpfs; needs root)", async (t) => {
    if (!AS_ROOT) return t.skip();
    const mnt = fresh();
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt]);
    try {
      const before = zeroCopyReceives();
      const full = await post(join(mnt, "big.bin"), big);
      expectError(full, 507, "not enough disk space available");
      expect(full.headers.connection).toBe("keep-alive"); // the body was read to its end
      expect(readdirSync(mnt)).toEqual([]);
      expect(zeroCopyReceives()).toBe(before);
    } finally {
      execFileSync("umount", [mnt]);
    }
  });

  it("a user cannot write through it where they may not, and the receiver writes only to what it is given", async () => {
    const bin = process.env.LOCALE2B_SPAWN_HELPER!;
    const out = join(dir, "piped.txt");
    execFileSync("sh", ["-c", `printf 'hello world' | ${bin} --receive 5 > ${out}`]);
    expect(readFileSync(out, "utf8")).toBe("hello");
    if (!AS_ROOT) return;
    const before = zeroCopyReceives();
    const owned = join(fx.base, "root-owned.bin");
    writeFileSync(owned, "root's");
    expectError(await post(owned, big), 403);
    expectError(await post(join(fx.base, "etc", "new.bin"), big), 403);
    expect(readFileSync(owned, "utf8")).toBe("root's");
    expect(zeroCopyReceives()).toBe(before);
    await expect.poll(receivers).toEqual([]);
  });
});
