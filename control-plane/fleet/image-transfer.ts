// Template images across a fleet's nodes, copied on demand: a template built
// with the Template SDK is built on one node; a create of it placed on
// another node (the holders were full) makes that node copy the image from a
// node that has it, once, over the same authenticated link the API replicas
// use (GET /fleet/v1/images/<key> with the node token), streamed as a tar
// straight to disk. Why a copy and not shared storage: a node's images are
// overlay lower layers and id-shifted trees, which network filesystems serve
// poorly or not at all, and a copy needs nothing from the cluster but the
// nodes' own disks.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import { join } from "node:path";
import type { Logger } from "pino";
import { NODE_LOST_MS } from "../domain/node.js";
import { findTemplateImage, type TemplateManifest } from "../images/layout.js";
import { setCurrent } from "../images/template-store.js";
import { KeyedLock } from "../manager/locks.js";
import type { Store } from "../store/store.js";
import { NODE_TOKEN_HEADER } from "./node-agent.js";

/** The route a node serves its images on (node token required, as for every node route). */
export const IMAGE_ROUTE = "/fleet/v1/images/";
const FOLDER_HEADER = "x-locale2b-image-folder";

/** Image keys a fleet copies: the Template SDK's builds (`@<build id>`); built-in templates are built by every node. */
const COPYABLE = /^@[0-9a-z-]{1,80}$/;

/** GET /fleet/v1/images/<key>: the image's current folder as a tar stream (without its holders and id-shifted trees). */
export function serveImage(imagesDir: string, req: IncomingMessage, res: ServerResponse, log: Logger): void {
  const key = decodeURIComponent((req.url ?? "").slice(IMAGE_ROUTE.length).split("?")[0]!);
  const image = COPYABLE.test(key) ? findTemplateImage(key, imagesDir) : undefined;
  if (!image) {
    res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ code: 404, message: `no image '${key}' on this node` }));
    return;
  }
  const folder = `${image.name}-${image.hash}`;
  const tar = spawn("tar", ["-C", join(imagesDir, "templates"), "-cf", "-", `--exclude=${folder}/.refs`, `--exclude=${folder}/rootfs-ids-*`, folder], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  tar.stderr.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  res.writeHead(200, { "content-type": "application/x-tar", [FOLDER_HEADER]: folder });
  // The response ends only when tar succeeded: a failed tar cuts it short, so the copy is refused, not half taken.
  tar.stdout.pipe(res, { end: false });
  res.on("close", () => {
    if (tar.exitCode === null) tar.kill();
  });
  tar.on("close", (code) => {
    if (code === 0) return void res.end();
    log.warn({ image: key, folder, code, stderr }, "sending an image to another node failed");
    res.destroy(new Error(`tar exited ${code}`));
  });
}

export interface ImagePuller {
  /** Makes sure image `key` is here, copying it from a node that has it when it is not. */
  ensure(key: string): Promise<void>;
}

export function imagePuller(o: { imagesDir: string; dataDir: string; store: Store; self: string; token: string; log: Logger }): ImagePuller {
  const lock = new KeyedLock();
  const templates = join(o.imagesDir, "templates");

  /** One copy from `url`: extracted under a temporary name, its manifest made ours, renamed into place, then made current. */
  const copyFrom = (url: string, key: string): Promise<void> =>
    new Promise((resolve, reject) => {
      const req = http.get(`${url}${IMAGE_ROUTE}${encodeURIComponent(key)}`, { headers: { [NODE_TOKEN_HEADER]: o.token } }, (res) => {
        const folder = String(res.headers[FOLDER_HEADER] ?? "");
        if (res.statusCode !== 200 || !/^@[0-9a-z-]+-[0-9a-f]{16}$/.test(folder) || !folder.startsWith(`${key}-`)) {
          res.resume();
          return reject(new Error(`${url} answered ${res.statusCode} for image '${key}'`));
        }
        const work = join(templates, `.pull-${randomBytes(6).toString("hex")}`);
        const cleanup = () => rm(work, { recursive: true, force: true });
        void mkdir(work, { recursive: true, mode: 0o700 }).then(() => {
          const tar = spawn("tar", ["-C", work, "-xf", "-", "--same-owner", "--same-permissions"], { stdio: ["pipe", "ignore", "pipe"] });
          let stderr = "";
          tar.stderr.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
          // The sender's response ends only when its tar succeeded: whether it ended is what says the copy is whole.
          const whole = new Promise<boolean>((done) => {
            res.once("end", () => done(true));
            res.once("aborted", () => done(false));
            res.once("error", () => done(false));
            res.once("close", () => done(res.complete));
          });
          tar.stdin.on("error", () => undefined); // tar may stop reading at the archive's end marker (EPIPE after)
          res.pipe(tar.stdin);
          res.on("error", () => tar.kill());
          res.on("aborted", () => tar.kill());
          tar.on("close", async (code) => {
            // tar exits at the archive's end marker, possibly before the record's padding has all arrived:
            // the rest of the response is drained, not taken for a transfer cut short.
            if (code !== 0) {
              req.destroy();
              void cleanup().then(() => reject(new Error(`copying image '${key}' from ${url} failed: tar exited ${code}: ${stderr.trim()}`)));
              return;
            }
            if (!res.complete) {
              res.unpipe(tar.stdin);
              res.resume();
            }
            if (!(await whole)) {
              void cleanup().then(() => reject(new Error(`copying image '${key}' from ${url} failed: the transfer was cut short`)));
              return;
            }
            void (async () => {
              const manifestPath = join(work, folder, "manifest.json");
              if (!existsSync(manifestPath)) throw new Error(`the copy of image '${key}' from ${url} has no ${folder}/manifest.json: the sender's image changed or is incomplete`);
              const manifest = JSON.parse(await readFile(manifestPath, "utf8")) as TemplateManifest;
              // Ours now: this node's orphan sweep keeps it while the build exists, and removes it with the template.
              manifest.definition = { ...(manifest.definition as object), owner: o.dataDir, copiedFrom: url };
              await writeFile(manifestPath, `${JSON.stringify(manifest, null, 2)}\n`);
              if (!existsSync(join(templates, folder))) await rename(join(work, folder), join(templates, folder));
              await setCurrent(o.imagesDir, key, folder);
            })().then(
              () => cleanup().then(resolve),
              (err: unknown) => cleanup().then(() => reject(err)),
            );
          });
        }, reject);
      });
      req.on("error", reject);
    });

  return {
    ensure(key: string): Promise<void> {
      if (!COPYABLE.test(key) || findTemplateImage(key, o.imagesDir)) return Promise.resolve();
      return lock.run(key, async () => {
        if (findTemplateImage(key, o.imagesDir)) return; // another create copied it meanwhile
        const now = Date.now();
        const holders = (await o.store.listNodes()).filter((n) => n.name !== o.self && now - n.heartbeatAt <= NODE_LOST_MS && n.images.includes(key));
        if (!holders.length) throw new Error(`image '${key}' is on no live node of the fleet: rebuild the template`);
        let last: unknown;
        for (const n of holders) {
          const started = Date.now();
          try {
            await copyFrom(n.url, key);
            o.log.info({ image: key, from: n.name, ms: Date.now() - started }, "copied a template image from another node");
            return;
          } catch (err) {
            last = err;
            o.log.warn({ err, image: key, from: n.name }, "copying a template image failed: trying another node");
          }
        }
        throw last instanceof Error ? last : new Error(String(last));
      });
    },
  };
}
