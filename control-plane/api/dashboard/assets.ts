import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** Where `npm run build` puts the bundled page (scripts/build-dashboard.mjs): dist/dashboard under the package. */
export function defaultAssetsDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json"))) {
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return join(dir, "dist", "dashboard");
}

interface Asset {
  body: Buffer;
  gzip?: Buffer;
  type: string;
  etag: string;
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".txt": "text/plain; charset=utf-8",
  ".json": "application/json",
  ".svg": "image/svg+xml",
};

/**
 * What every dashboard answer carries: no framing by other sites, scripts
 * and connections only from this origin, no referrer leaving the page.
 */
export const SECURITY_HEADERS: Record<string, string> = {
  "content-security-policy":
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  "x-frame-options": "DENY",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
};

/**
 * The built page's files, read once into memory (a few hundred KiB) with
 * their gzipped copies, served with ETags. Nothing in them is secret: the
 * data comes from the API, behind the session.
 */
export class DashboardAssets {
  private readonly files = new Map<string, Asset>();

  constructor(readonly dir: string) {
    if (!existsSync(join(dir, "index.html"))) return;
    for (const name of readdirSync(dir)) {
      if (name.endsWith(".gz")) continue;
      const ext = name.slice(name.lastIndexOf("."));
      const type = TYPES[ext];
      if (!type) continue;
      const body = readFileSync(join(dir, name));
      const gz = join(dir, `${name}.gz`);
      this.files.set(name, {
        body,
        ...(existsSync(gz) ? { gzip: readFileSync(gz) } : {}),
        type,
        etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 22)}"`,
      });
    }
  }

  get built(): boolean {
    return this.files.has("index.html");
  }

  has(name: string): boolean {
    return this.files.has(name);
  }

  /** Sends one file (index.html for the page's own routes). */
  send(req: IncomingMessage, res: ServerResponse, name: string): void {
    const a = this.files.get(name);
    if (!a) {
      res.writeHead(404, { "content-type": "text/plain; charset=utf-8", ...SECURITY_HEADERS }).end("not found\n");
      return;
    }
    const headers: Record<string, string> = {
      "content-type": a.type,
      etag: a.etag,
      // Revalidated every load (an ETag match is a 304): a rebuild is seen at once.
      "cache-control": "no-cache",
      vary: "accept-encoding",
      ...SECURITY_HEADERS,
    };
    if (req.headers["if-none-match"] === a.etag) {
      res.writeHead(304, headers).end();
      return;
    }
    const gzip = a.gzip && /\bgzip\b/.test(String(req.headers["accept-encoding"] ?? ""));
    const body = gzip ? a.gzip! : a.body;
    res.writeHead(200, { ...headers, ...(gzip ? { "content-encoding": "gzip" } : {}), "content-length": String(body.length) });
    res.end(req.method === "HEAD" ? undefined : body);
  }
}
