// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The real `e2b` JS SDK (files: write and read, bulk transfer, errors) against
// a real envd, in debug mode (E2B_DEBUG=true + E2B_SANDBOX_URL, see test/helpers/sdk.ts).
import { createHash, type Hash } from "node:crypto";
import { mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { FileNotFoundError, FileType, InvalidArgumentError, NotFoundError } from "e2b";
import { describe, expect, it } from "vitest";
import { pseudoRandomStream, rejection } from "../helpers/sdk.js";
import { fresh, sandbox, unique, useFilesSandbox } from "../helpers/sdk-files.js";

useFilesSandbox();

/** A standalone ArrayBuffer holding `bytes`. */
function arrayBuffer(bytes: Uint8Array): ArrayBuffer {
  return bytes.slice().buffer as ArrayBuffer;
}

function allBytes(repeat: number): Uint8Array {
  const b = new Uint8Array(256 * repeat);
  for (let i = 0; i < b.length; i++) b[i] = i % 256;
  return b;
}

async function drain(stream: ReadableStream<Uint8Array>, hash?: Hash): Promise<{ bytes: number; chunks: Uint8Array[] }> {
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) {
    bytes += chunk.length;
    if (hash) hash.update(chunk);
    else chunks.push(chunk);
  }
  return { bytes, chunks };
}

describe("write and read", () => {
  it("writes and reads text", async () => {
    const dir = fresh();
    const path = join(dir, "hello.txt");
    const text = "héllo wörld ✓\nsecond line\n";
    const info = await sandbox.files.write(path, text);
    expect(info).toMatchObject({ name: "hello.txt", path, type: FileType.FILE });
    expect(await sandbox.files.read(path)).toBe(text);
  });

  it("writes and reads binary data (ArrayBuffer and Blob in, bytes/blob/stream out)", async () => {
    const dir = fresh();
    const bytes = allBytes(1000);
    const a = join(dir, "a.bin");
    const b = join(dir, "b.bin");
    await sandbox.files.write(a, arrayBuffer(bytes));
    await sandbox.files.write(b, new Blob([arrayBuffer(bytes)]));

    const readA = await sandbox.files.read(a, { format: "bytes" });
    expect(readA).toBeInstanceOf(Uint8Array);
    expect(Buffer.from(readA).equals(Buffer.from(bytes))).toBe(true);

    const blob = await sandbox.files.read(b, { format: "blob" });
    expect(Buffer.from(await blob.arrayBuffer()).equals(Buffer.from(bytes))).toBe(true);

    const { chunks } = await drain(await sandbox.files.read(a, { format: "stream" }));
    expect(Buffer.concat(chunks).equals(Buffer.from(bytes))).toBe(true);
  });

  it("writes a ReadableStream and reads text as a stream", async () => {
    const dir = fresh();
    const path = join(dir, "streamed.txt");
    const parts = ["alpha ", "beta ", "gamma ✓"];
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        for (const p of parts) c.enqueue(new TextEncoder().encode(p));
        c.close();
      },
    });
    const info = await sandbox.files.write(path, body);
    expect(info).toMatchObject({ name: "streamed.txt", path, type: FileType.FILE });
    const { chunks } = await drain(await sandbox.files.read(path, { format: "stream" }));
    expect(Buffer.concat(chunks).toString("utf8")).toBe(parts.join(""));
  });

  it("round-trips gzip-compressed uploads and downloads", async () => {
    const dir = fresh();
    const path = join(dir, "gz.txt");
    const text = "compress me ".repeat(10_000);
    await sandbox.files.write(path, text, { gzip: true });
    expect(await sandbox.files.read(path, { gzip: true })).toBe(text);
    expect(await sandbox.files.read(path)).toBe(text);
    expect(statSync(path).size).toBe(text.length);
  });

  it("writes and reads an empty file", async () => {
    const dir = fresh();
    const path = join(dir, "empty");
    await sandbox.files.write(path, "");
    expect(await sandbox.files.read(path)).toBe("");
    expect((await sandbox.files.read(path, { format: "bytes" })).length).toBe(0);
    expect((await sandbox.files.getInfo(path)).size).toBe(0);
  });

  it("overwrites (truncates) an existing file and creates missing parent directories", async () => {
    const dir = fresh();
    const path = join(dir, "deep", "er", "file.txt");
    await sandbox.files.write(path, "a much longer first version");
    await sandbox.files.write(path, "short");
    expect(await sandbox.files.read(path)).toBe("short");
    expect((await sandbox.files.getInfo(join(dir, "deep", "er"))).type).toBe(FileType.DIR);
  });

  it("overwrites a file in place (same inode), so hard links see the new content", async () => {
    const dir = fresh();
    const path = join(dir, "inplace.txt");
    await sandbox.files.write(path, "old");
    await sandbox.commands.run(`chmod 640 ${path}; ln ${path} ${join(dir, "hardlink.txt")}`);
    const inode = statSync(path).ino;
    await sandbox.files.write(path, "new content");
    expect(await sandbox.files.read(join(dir, "hardlink.txt"))).toBe("new content");
    expect(statSync(path).ino).toBe(inode);
    expect(statSync(path).mode & 0o777).toBe(0o640); // the mode survives
    expect(readdirSync(dir).sort()).toEqual(["hardlink.txt", "inplace.txt"]); // nothing staged here
  });

  it("writes multiple files at once (array form and writeFiles)", async () => {
    const dir = fresh();
    const infos = await sandbox.files.write([
      { path: join(dir, "one.txt"), data: "1" },
      { path: join(dir, "sub", "two.bin"), data: arrayBuffer(new Uint8Array([0, 1, 2, 255])) },
      { path: join(dir, "three.txt"), data: new Blob(["3"]) },
    ]);
    expect(infos.map((i) => i.path).sort()).toEqual(
      [join(dir, "one.txt"), join(dir, "sub", "two.bin"), join(dir, "three.txt")].sort(),
    );
    expect(infos.every((i) => i.type === FileType.FILE)).toBe(true);
    expect(await sandbox.files.read(join(dir, "one.txt"))).toBe("1");
    expect(Array.from(await sandbox.files.read(join(dir, "sub", "two.bin"), { format: "bytes" }))).toEqual([0, 1, 2, 255]);
    expect(await sandbox.files.read(join(dir, "three.txt"))).toBe("3");

    const more = await sandbox.files.writeFiles([
      { path: join(dir, "four.txt"), data: "4" },
      { path: join(dir, "five.txt"), data: "5" },
    ]);
    expect(more).toHaveLength(2);
    expect(await sandbox.files.read(join(dir, "five.txt"))).toBe("5");
  });

  it("writes files as another user, owned by that user", async () => {
    const path = `/tmp/locale2b-sdk-write-${process.pid}-${unique()}`;
    try {
      await sandbox.files.write(path, "mine", { user: "nobody" });
      const info = await sandbox.files.getInfo(path);
      expect(info.owner).toBe("nobody");
      expect(await sandbox.files.read(path, { user: "nobody" })).toBe("mine");
    } finally {
      await sandbox.files.remove(path);
    }
  });
});

describe("bulk transfer", () => {
  // Generous timeout: the SDK's fetch (undici) inflates envd's gzipped download
  // chunk by chunk, which crawls on a loaded 2-core machine (seen: 5 s to 80 s).
  it("round-trips 100 MiB streamed both ways with the same sha256", { timeout: 600_000 }, async () => {
    const path = join(fresh(), "big.bin");
    const size = 100 * 1024 * 1024;
    const sent = createHash("sha256");
    const info = await sandbox.files.write(path, pseudoRandomStream(size, 0x2b2b2b2b, sent));
    expect(info).toMatchObject({ path, name: "big.bin", type: FileType.FILE });
    const sentDigest = sent.digest("hex");

    const received = createHash("sha256");
    const { bytes } = await drain(await sandbox.files.read(path, { format: "stream" }), received);
    expect(bytes).toBe(size);
    expect(received.digest("hex")).toBe(sentDigest);

    expect((await sandbox.files.getInfo(path)).size).toBe(size);
    expect(statSync(path).size).toBe(size);
    expect((await sandbox.commands.run(`sha256sum ${path}`)).stdout.split(" ")[0]).toBe(sentDigest);
    await sandbox.files.remove(path);
  });
});

describe("errors", () => {
  it("reading a missing file throws FileNotFoundError (a NotFoundError)", async () => {
    const dir = fresh();
    const err = await rejection(sandbox.files.read(join(dir, "missing.txt")));
    expect(err).toBeInstanceOf(FileNotFoundError);
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err.name).toBe("FileNotFoundError");
    expect(await rejection(sandbox.files.read(join(dir, "missing.txt"), { format: "stream" }))).toBeInstanceOf(
      FileNotFoundError,
    );
  });

  it("getInfo, list and rename of a missing path throw FileNotFoundError", async () => {
    const dir = fresh();
    const missing = join(dir, "missing");
    expect(await rejection(sandbox.files.getInfo(missing))).toBeInstanceOf(FileNotFoundError);
    expect(await rejection(sandbox.files.list(missing))).toBeInstanceOf(FileNotFoundError);
    expect(await rejection(sandbox.files.rename(missing, join(dir, "other")))).toBeInstanceOf(FileNotFoundError);
  });

  it("reading a directory or listing a file throws InvalidArgumentError", async () => {
    const dir = fresh();
    writeFileSync(join(dir, "file"), "x");
    expect(await rejection(sandbox.files.read(dir))).toBeInstanceOf(InvalidArgumentError);
    expect(await rejection(sandbox.files.list(join(dir, "file")))).toBeInstanceOf(InvalidArgumentError);
  });

  it("writing where a directory stands fails with InvalidArgumentError", async () => {
    const dir = fresh();
    mkdirSync(join(dir, "taken"));
    expect(await rejection(sandbox.files.write(join(dir, "taken"), "x"))).toBeInstanceOf(InvalidArgumentError);
  });
});
