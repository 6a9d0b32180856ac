import { statfsSync } from "node:fs";
import http from "node:http";
import { homedir } from "node:os";
import { join } from "node:path";
import { findExecutable } from "../../control-plane/host/executables.js";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { request, startControlPlaneChild, type ControlPlaneChild } from "../lib/control-plane.js";

/** Helpers shared by the parts of `npm run bench -- templates` (bench/templates/). */

export const GiB = 1024 ** 3;

/** The image cache the servers use: $LOCALE2B_IMAGES_DIR, else ~/.cache/locale2b/images (as the tests). */
export function benchImagesDir(): string {
  return process.env.LOCALE2B_IMAGES_DIR || join(homedir(), ".cache", "locale2b", "images");
}

/** What the E2B SDKs need to reach a server (passed per call: the benchmark's process env stays as it is). */
export interface SdkConnection {
  apiKey: string;
  apiUrl: string;
  sandboxUrl: string;
}

export interface TemplateServer {
  cp: ControlPlaneChild;
  runtime: string;
  conn: SdkConnection;
  /** A JSON call of the E2B API; throws unless the status is one of `ok`. */
  api(method: string, path: string, body: unknown, ok: number[]): Promise<string>;
  /** Notes a template this run made: stop() deletes it if it is still there. */
  track(id: string): void;
  /** Deletes a template (and its images in the shared cache), once no sandbox uses it. */
  deleteTemplate(id: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Why a part cannot run on `runtime` with `templates` built, or undefined when
 * it can: root (builds and the process runtime's sandboxes), runsc for gvisor,
 * and the built-in templates in the image cache (they are not built here).
 */
export function missing(runtime: string, templates: string[], opts: { builds?: boolean } = {}): string | undefined {
  const why: string[] = [];
  if (process.getuid?.() !== 0) why.push("root");
  if (runtime === "gvisor" && !findExecutable("runsc")) why.push("runsc (scripts/setup-host installs it)");
  const dir = benchImagesDir();
  for (const t of templates) if (!findTemplateImage(t, dir)) why.push(`the ${t} template in ${dir} (locale2b template build ${t})`);
  if (opts.builds && !why.length) {
    // A build's image is about 1.5 GiB on the process runtime (its root and the copy with shifted ids) until deleted.
    const free = freeBytes(dir);
    if (free < 2 * GiB) why.push(`at least 2 GiB free in ${dir} (${(free / GiB).toFixed(1)} GiB now)`);
  }
  return why.length ? `needs ${why.join(", ")}` : undefined;
}

export function freeBytes(dir: string): number {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
}

/** The built-in template image a server will use (its content hash and when it was built), for the headings. */
export function imageNote(name: string): string {
  const img = findTemplateImage(name, benchImagesDir());
  return img ? `${name} ${img.hash} (built ${img.manifest.builtAt ?? "?"})` : `${name}: not built`;
}

/**
 * `locale2b serve` on `runtime` with a fresh data dir, the shared image cache,
 * no image builds of its own (the built-in templates must be built already),
 * no warm pool of `base`, and `templateWarmPool` warm sandboxes per template
 * with a start command.
 */
export async function startTemplateServer(runtime: string, templateWarmPool: number): Promise<TemplateServer> {
  const cp = await startControlPlaneChild({
    extraArgs: ["--runtime", runtime, "--warm-pool", "0"],
    timeoutMs: 60_000,
    env: { LOCALE2B_IMAGES_DIR: benchImagesDir(), LOCALE2B_NO_IMAGE_BUILD: "1", LOCALE2B_TEMPLATE_WARM_POOL: String(templateWarmPool) },
  });
  const api = async (method: string, path: string, body: unknown, ok: number[]) => {
    const r = await request(`${cp.url}${path}`, method, { "X-API-Key": cp.apiKey }, body);
    if (!ok.includes(r.status)) throw new Error(`${method} ${path} answered ${r.status}: ${r.body.slice(0, 300)}`);
    return r.body;
  };
  const templates = new Set<string>();
  return {
    cp,
    runtime,
    conn: { apiKey: cp.apiKey, apiUrl: cp.url, sandboxUrl: cp.url },
    api,
    track: (id) => void templates.add(id),
    async deleteTemplate(id) {
      await api("DELETE", `/templates/${encodeURIComponent(id)}`, undefined, [204, 404]);
      templates.delete(id);
    },
    async stop() {
      // Templates first: their images are in the shared cache, which outlives the data dir.
      for (const id of templates) await api("DELETE", `/templates/${encodeURIComponent(id)}`, undefined, [204, 404]).catch(() => undefined);
      await cp.stop();
    },
  };
}

/** One entry of a build's log, as `GET .../builds/{id}/status` gives it. */
export interface BuildLogEntry {
  timestamp: string;
  message: string;
  level: string;
  step?: string;
}

/** A build's whole log (the status route gives at most 100 entries a call). */
export async function buildLog(s: TemplateServer, templateId: string, buildId: string): Promise<BuildLogEntry[]> {
  const out: BuildLogEntry[] = [];
  for (;;) {
    const body = JSON.parse(await s.api("GET", `/templates/${templateId}/builds/${buildId}/status?logsOffset=${out.length}&limit=100`, undefined, [200])) as { logEntries: BuildLogEntry[] };
    out.push(...body.logEntries);
    if (body.logEntries.length < 100) return out;
  }
}

const sdkAgent = new http.Agent({ keepAlive: true, maxSockets: 16 });

/**
 * ms from `t0` to the first byte of the answer to `GET /` on `port` of sandbox
 * `id`, through the control plane's proxy (E2b-Sandbox-Id / E2b-Sandbox-Port,
 * as the SDK's sandboxUrl mode routes it); the whole body must be `expect`.
 */
export function proxiedGet(s: TemplateServer, id: string, port: number, expect: string, t0: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${s.cp.url}/`, { agent: sdkAgent, headers: { "E2b-Sandbox-Id": id, "E2b-Sandbox-Port": String(port) } });
    req.once("error", reject);
    req.once("response", (res) => {
      let first: number | undefined;
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => {
        first ??= performance.now();
        chunks.push(c);
      });
      res.once("error", reject);
      res.once("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        if (res.statusCode !== 200 || body !== expect) reject(new Error(`GET / on port ${port} of ${id} answered ${res.statusCode}: ${body.slice(0, 200)}`));
        else resolve((first ?? performance.now()) - t0);
      });
    });
    req.end();
  });
}

/** Waits until the server's warm pools hold `n` ready sandboxes; false after `timeoutMs`. */
export async function waitWarm(s: TemplateServer, n: number, timeoutMs = 120_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if ((await s.cp.warmReady()) >= n) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}
