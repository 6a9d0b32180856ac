// A fleet node copying a Template SDK image from another node (fleet/image-
// transfer.ts): the real sender route and receiver, real tar, a real SQLite
// store naming the holder. The copy is taken only when the sender's response
// ended (its tar succeeded); a response cut short leaves nothing; and tar on
// the receiving side, which stops at the archive's last record, does not make
// a whole transfer whose response ends a moment later look cut short (a
// clean-clone CI run failed so).
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { imagePuller, IMAGE_ROUTE, serveImage } from "../../control-plane/fleet/image-transfer.js";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { SqliteStore } from "../../control-plane/store/sqlite-store.js";

const log = pino({ level: "silent" });
const KEY = "@0a1b2c3d-test-build";
const HASH = "0123456789abcdef";
const FOLDER = `${KEY}-${HASH}`;
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function tempDir(prefix: string): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

/** A sender's images dir holding one built image (a manifest and 300 KiB of rootfs). */
function senderImages(): { dir: string; data: Buffer } {
  const dir = tempDir("locale2b-imgsend-");
  const folder = join(dir, "templates", FOLDER);
  mkdirSync(join(folder, "rootfs"), { recursive: true });
  writeFileSync(join(folder, "manifest.json"), JSON.stringify({ name: KEY, hash: HASH, builtAt: new Date().toISOString(), definition: {} }));
  const data = randomBytes(300 * 1024);
  writeFileSync(join(folder, "rootfs", "data.bin"), data);
  writeFileSync(join(dir, "templates", `${KEY}.current`), `${FOLDER}\n`);
  return { dir, data };
}

async function listen(handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** The receiving node: its images dir, and a store that names `url` as the image's holder. */
async function receiver(url: string): Promise<{ images: string; ensure: () => Promise<void> }> {
  const dataDir = tempDir("locale2b-imgrecv-");
  const images = join(dataDir, "images");
  mkdirSync(join(images, "templates"), { recursive: true });
  const store = new SqliteStore(join(dataDir, "locale2b.db"));
  cleanups.push(() => store.close());
  const now = Date.now();
  await store.putNode({ name: "n1", url, state: "ready", heartbeatAt: now, startedAt: now, runtime: "process", images: [KEY], capacity: { maxSandboxes: 10, memoryBudgetMB: 4096, sandboxes: 0, memoryMB: 0 } });
  const puller = imagePuller({ imagesDir: images, dataDir, store, self: "n2", token: "t", log });
  return { images, ensure: () => puller.ensure(KEY) };
}

/** The archive the real route would send, made by tar as it does. */
function archive(dir: string): Buffer {
  return execFileSync("tar", ["-C", join(dir, "templates"), "-cf", "-", FOLDER], { maxBuffer: 64 << 20 });
}

describe("copying a template image between nodes", () => {
  it("copies the image the real route sends: made current, the files byte for byte, marked as a copy", async () => {
    const { dir, data } = senderImages();
    const url = await listen((req, res) => serveImage(dir, req, res, log));
    const r = await receiver(url);
    await r.ensure();
    const image = findTemplateImage(KEY, r.images)!;
    expect(image.dir).toBe(join(r.images, "templates", FOLDER));
    expect(readFileSync(join(image.dir, "rootfs", "data.bin")).equals(data)).toBe(true);
    expect((image.manifest.definition as { copiedFrom?: string }).copiedFrom).toBe(url);
    expect(readdirSync(join(r.images, "templates")).filter((n) => n.startsWith(".pull-"))).toEqual([]);
  });

  it("a response that ends a moment after its last record (its tar still closing) is a whole copy, not one cut short", async () => {
    const { dir, data } = senderImages();
    const bytes = archive(dir);
    const url = await listen((req, res) => {
      if (!req.url?.startsWith(IMAGE_ROUTE)) return void res.writeHead(404).end();
      res.writeHead(200, { "content-type": "application/x-tar", "x-locale2b-image-folder": FOLDER });
      res.write(bytes);
      setTimeout(() => res.end(), 500); // the receiver's tar has read the last record and exited by now
    });
    const r = await receiver(url);
    await r.ensure();
    expect(readFileSync(join(findTemplateImage(KEY, r.images)!.dir, "rootfs", "data.bin")).equals(data)).toBe(true);
  });

  it("a response cut short leaves no image and nothing half-extracted", async () => {
    const { dir } = senderImages();
    const bytes = archive(dir);
    const url = await listen((req, res) => {
      res.writeHead(200, { "content-type": "application/x-tar", "x-locale2b-image-folder": FOLDER });
      res.write(bytes.subarray(0, bytes.length >> 1), () => setTimeout(() => res.destroy(), 100));
    });
    const r = await receiver(url);
    await expect(r.ensure()).rejects.toThrow(/could not|cut short|failed/);
    expect(findTemplateImage(KEY, r.images)).toBeUndefined();
    expect(readdirSync(join(r.images, "templates"))).toEqual([]);
  });
});
