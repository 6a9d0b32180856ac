// The fixture and request helpers the /files suites share (http-files-upload
// and http-files-download): a real envd acting for `user`, raw HTTP calls,
// and checks of answers against E2B's envd OpenAPI spec.
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, chownSync, createReadStream, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, expect } from "vitest";
import { startTestEnvd, type TestEnvd } from "./envd.js";
import { ENVD_SPEC, specAvailable, validatorFor } from "./openapi.js";

const HAVE_SPEC = specAvailable(ENVD_SPEC);
if (!HAVE_SPEC) console.warn(`skipping OpenAPI schema checks: ${ENVD_SPEC} is absent`);
const uploadSchema = HAVE_SPEC ? validatorFor(ENVD_SPEC, "#/components/responses/UploadSuccess") : undefined;
const errorSchema = HAVE_SPEC ? validatorFor(ENVD_SPEC, "#/components/schemas/Error") : undefined;
export const AS_ROOT = process.getuid?.() === 0;
export const MiB = 1024 * 1024;

/** The fixture's envd and directories, set by useFilesEnvd()'s beforeAll. */
export const fx = { base: "", home: "", envd: undefined as unknown as TestEnvd };
let n = 0;

/** Registers the fixture: an envd acting for `user` (uid 1000) whose home is under a fresh directory. */
export function useFilesEnvd(): void {
  beforeAll(async () => {
  fx.base = mkdtempSync(join(tmpdir(), "locale2b-http-files-"));
  // envd acts as the requesting user: `user` must be able to reach its home, as in a sandbox.
  chmodSync(fx.base, 0o755);
  const etc = join(fx.base, "etc");
  fx.home = join(fx.base, "home", "user");
  mkdirSync(etc);
  mkdirSync(fx.home, { recursive: true });
  if (AS_ROOT) chownSync(fx.home, 1000, 1000);
  writeFileSync(join(etc, "passwd"), `root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::${fx.home}:/bin/bash\n`);
  writeFileSync(join(etc, "group"), "root:x:0:\nuser:x:1000:\n");
  fx.envd = await startTestEnvd({ etc, defaultUser: "user" });
});
afterAll(async () => {
  await fx.envd?.close();
  rmSync(fx.base, { recursive: true, force: true });
});
}

export interface Res {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** One HTTP/1.1 request with exact control of the headers (no automatic Accept-Encoding). */
export function call(method: string, path: string, headers: Record<string, string> = {}, body?: Buffer | Readable): Promise<Res> {
  return new Promise((resolve, reject) => {
    const req = http.request(fx.envd.url + path, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    if (body instanceof Readable) body.pipe(req);
    else req.end(body);
  });
}

/** GET `path`, not reading for a moment after the headers (back-pressure on envd), then all of it. */
export function readSlowly(path: string): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    http.get(fx.envd.url + path, (res) => {
      const chunks: Buffer[] = [];
      res.pause();
      setTimeout(() => res.resume(), 300);
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve(Buffer.concat(chunks)));
      res.on("error", reject);
    }).on("error", reject);
  });
}

/** This process's children whose command line has `flag` (`--sendfile`, `--receive`: the init binary's file movers). */
export function childrenWith(flag: string): number[] {
  const kids = readdirSync(`/proc/${process.pid}/task`).flatMap((t) =>
    readFileSync(`/proc/${process.pid}/task/${t}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number),
  );
  return kids.filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").includes(flag);
    } catch {
      return false;
    }
  });
}

export function files(params: Record<string, string>): string {
  return `/files?${new URLSearchParams(params)}`;
}

/** A directory of the test's own, owned by `user` (envd acts as the requesting user). */
export function fresh(): string {
  const dir = join(fx.base, `case-${n++}`);
  mkdirSync(dir);
  if (AS_ROOT) chownSync(dir, 1000, 1000);
  return dir;
}

export function json(res: Res): unknown {
  return JSON.parse(res.body.toString("utf8"));
}

export function expectUploaded(res: Res, paths: string[]): void {
  expect(res.status, res.body.toString()).toBe(200);
  expect(res.headers["content-type"]).toMatch(/^application\/json/);
  const body = json(res) as { path: string }[];
  if (uploadSchema) expect(uploadSchema(body), uploadSchema.errorText).toBe(true);
  expect(body.map((e) => e.path)).toEqual(paths);
}

export function expectError(res: Res, status: number, message?: string | RegExp): void {
  expect(res.status, res.body.toString()).toBe(status);
  expect(res.headers["content-type"]).toMatch(/^application\/json/);
  const body = json(res) as { code: number; message: string };
  if (errorSchema) expect(errorSchema(body), errorSchema.errorText).toBe(true);
  expect(body.code).toBe(status);
  if (message !== undefined) expect(body.message).toMatch(message);
}

export const octet = { "content-type": "application/octet-stream" };

export function multipart(parts: { name?: string; filename?: string; data: Buffer | string }[]): { body: Buffer; type: string } {
  const boundary = `locale2b-${randomBytes(8).toString("hex")}`;
  const chunks: Buffer[] = [];
  for (const p of parts) {
    const filename = p.filename === undefined ? "" : `; filename="${p.filename}"`;
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${p.name ?? "file"}"${filename}\r\n`));
    chunks.push(Buffer.from("Content-Type: application/octet-stream\r\n\r\n"), Buffer.from(p.data), Buffer.from("\r\n"));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), type: `multipart/form-data; boundary=${boundary}` };
}

export { waitFor } from "./wait.js";

export const temps = (dir: string) => readdirSync(dir).filter((f) => f.startsWith(".e2b-upload-"));

export async function sha256File(path: string): Promise<string> {
  const h = createHash("sha256");
  await pipeline(createReadStream(path), h);
  return h.digest("hex");
}
