// The files of COPY steps: the SDK asks for an upload URL per files hash
// (GET /templates/{id}/files/{hash}), then PUTs a (gzipped) tar to it with no
// API key. The URL authenticates itself: an HMAC over the template, the hash
// and an expiry, made with a key only the server has, so it cannot be forged,
// reused after it expires, or replayed for another template or hash. Files
// are stored by hash; a PUT is written to a temporary file and renamed into
// place only once whole and within the size limit.
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, renameSync, rmSync, statSync, utimesSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { Transform } from "node:stream";
import { ControlPlaneError } from "../domain/errors.js";

const HASH_RE = /^[0-9a-f]{64}$/;

export interface UploadSettings {
  /** How long an upload URL is valid. */
  ttlSeconds: number;
  /** Largest upload accepted. */
  maxBytes: number;
}

export const DEFAULT_UPLOADS: UploadSettings = { ttlSeconds: 3600, maxBytes: 2 * 1024 * 1024 * 1024 };

export class UploadTooLarge extends Error {}

export class TemplateFiles {
  private readonly dir: string;

  constructor(
    dataDir: string,
    private readonly key: Buffer,
    readonly settings: UploadSettings = DEFAULT_UPLOADS,
  ) {
    this.dir = join(dataDir, "template-files");
  }

  static checkHash(hash: string): void {
    if (!HASH_RE.test(hash)) throw new ControlPlaneError("invalid", `invalid files hash: expected 64 lowercase hex characters (sha256), got ${JSON.stringify(hash.slice(0, 80))}`);
  }

  /** Where the files of `hash` are kept, if uploaded. */
  path(hash: string): string | undefined {
    TemplateFiles.checkHash(hash);
    const p = join(this.dir, hash);
    return existsSync(p) ? p : undefined;
  }

  /** A signed PUT URL for the files of `hash`, for this template only, valid `ttlSeconds`. */
  uploadUrl(baseUrl: string, templateId: string, hash: string, now = Date.now()): string {
    TemplateFiles.checkHash(hash);
    const expires = Math.floor(now / 1000) + this.settings.ttlSeconds;
    const signature = this.sign(templateId, hash, expires);
    return `${baseUrl}/templates/${encodeURIComponent(templateId)}/files/${hash}?expires=${expires}&signature=${signature}`;
  }

  /** Why a PUT's signature is refused, or undefined when it is good. */
  refusal(templateId: string, hash: string, query: URLSearchParams, now = Date.now()): string | undefined {
    const expires = Number(query.get("expires"));
    const given = query.get("signature") ?? "";
    if (!given || !Number.isInteger(expires)) return "this upload URL is not signed: ask for one with GET /templates/{templateID}/files/{hash}";
    const want = Buffer.from(this.sign(templateId, hash, expires), "hex");
    const got = Buffer.from(/^[0-9a-f]{64}$/.test(given) ? given : "", "hex");
    if (got.length !== want.length || !timingSafeEqual(got, want)) return "invalid upload signature: it was not made by this server for this template and files hash";
    if (expires * 1000 < now) return "this upload URL has expired: ask for a new one with GET /templates/{templateID}/files/{hash}";
    return undefined;
  }

  /**
   * Stores a PUT body under `hash`: streamed to a temporary file, refused
   * (UploadTooLarge) past the limit, renamed into place only when complete.
   */
  async receive(hash: string, body: IncomingMessage): Promise<{ bytes: number }> {
    TemplateFiles.checkHash(hash);
    const declared = Number(body.headers["content-length"] ?? NaN);
    if (declared > this.settings.maxBytes) throw new UploadTooLarge(`upload of ${declared} bytes is over the limit of ${this.settings.maxBytes} bytes`);
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const tmp = join(this.dir, `.tmp-${hash}-${randomBytes(6).toString("hex")}`);
    let bytes = 0;
    const max = this.settings.maxBytes;
    const count = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        bytes += chunk.length;
        if (bytes > max) cb(new UploadTooLarge(`upload is over the limit of ${max} bytes`));
        else cb(null, chunk);
      },
    });
    try {
      await pipeline(body, count, createWriteStream(tmp, { mode: 0o600 }));
      if (Number.isFinite(declared) && bytes !== declared) throw new ControlPlaneError("invalid", `upload ended after ${bytes} of ${declared} bytes`);
      renameSync(tmp, join(this.dir, hash));
      return { bytes };
    } finally {
      rmSync(tmp, { force: true });
    }
  }

  /** Marks the files of `hash` as used now (the clean-up removes files not used for a while). */
  touch(hash: string): void {
    const p = this.path(hash);
    if (p) utimesSync(p, new Date(), new Date());
  }

  /** Bytes of the stored files of `hash`, or undefined. */
  size(hash: string): number | undefined {
    const p = this.path(hash);
    return p ? statSync(p).size : undefined;
  }

  private sign(templateId: string, hash: string, expires: number): string {
    return createHmac("sha256", this.key).update(`template-files\n${templateId}\n${hash}\n${expires}`).digest("hex");
  }
}
