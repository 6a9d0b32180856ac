// A root filesystem made by a build (or pulled from a registry) becomes an
// image in the image cache: what locale2b puts into every guest added or
// refreshed (envd with its Node and libraries, the init, hostname, the sandbox user), packed
// into rootfs.ext4 when the runtime boots disks, with a manifest, under
// `templates/<key>-<hash16>/` and `templates/<key>.current`. The folder is
// made under a temporary name, private to root (a build's files are the
// build's: a setuid binary in it is not for the host's users), and renamed
// into place once complete.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, chown, mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join, posix } from "node:path";
import { ensureEnvdBundle } from "../images/envd-bundle.js";
import { ensureInitBinary } from "../images/guest-init.js";
import { imageHeld, imageHolders } from "../images/image-refs.js";
import { ensureGuestRuntime, installGuestRuntime } from "../images/guest-runtime.js";
import { GUEST, type TemplateManifest } from "../images/layout.js";
import { packExt4, writeGuestBasics } from "../images/template-assemble.js";
import { guestMkdir, readGuestFile, treeBytes, writeGuestFile } from "../images/template-fs.js";
import { setCurrent } from "../images/template-store.js";
import { addMountPoints } from "./export-root.js";
import { DB_FILE } from "../config.js";
import { ACTIVITY_DB_FILE } from "../store/activity-db.js";

export interface NewImage {
  /** The image's key (`templates/<key>.current`). */
  key: string;
  /** `templates/<key>-<hash16>`. */
  dir: string;
  rootfsBytes: number;
}

/** A fresh private folder for an image's files; `rootfs/` is where the tree goes. */
export async function imageWorkDir(imagesDir: string, key: string): Promise<{ dir: string; rootfs: string }> {
  const templates = join(imagesDir, "templates");
  await mkdir(templates, { recursive: true });
  const dir = join(templates, `.tmp-${key}-${randomBytes(6).toString("hex")}`);
  await mkdir(dir, { mode: 0o700 });
  const rootfs = join(dir, "rootfs");
  await mkdir(rootfs, { mode: 0o755 });
  return { dir, rootfs };
}

/**
 * Adds root (an image made `FROM scratch` may have no /etc/passwd: envd acts
 * as root for the SDK's `user: "root"`) and the sandbox user to a root that
 * lacks them, by its files (the image may have no useradd). The sandbox user
 * gets uid/gid GUEST.uid, or the first free id from there when the image gave
 * it to another user (`node` in node:*, `ubuntu` in ubuntu:24.04): envd acts
 * as users by name. Returns the sandbox user's uid and gid.
 */
async function ensureSandboxUser(rootfs: string): Promise<{ uid: number; gid: number }> {
  const withLine = (text: string, line: string) => `${text}${text === "" || text.endsWith("\n") ? "" : "\n"}${line}\n`;
  const append = async (file: string, text: string, line: string, mode: number): Promise<string> => {
    const content = withLine(text, line);
    await writeGuestFile(rootfs, file, { content, mode });
    return content;
  };
  const fields = (text: string) => text.split("\n").map((l) => l.split(":"));
  let passwd = (await readGuestFile(rootfs, "/etc/passwd")) ?? "";
  let group = (await readGuestFile(rootfs, "/etc/group")) ?? "";
  if (!fields(passwd).some((u) => u[2] === "0")) passwd = await append("/etc/passwd", passwd, "root:x:0:0:root:/root:/bin/sh", 0o644);
  if (!fields(group).some((g) => g[2] === "0")) group = await append("/etc/group", group, "root:x:0:", 0o644);
  const users = fields(passwd);
  const existing = users.find((u) => u[0] === GUEST.user);
  if (existing) return { uid: Number(existing[2]), gid: Number(existing[3]) };
  const taken = new Set([...users.map((u) => u[2]), ...fields(group).map((g) => g[2])].filter(Boolean).map(Number));
  let id = GUEST.uid;
  while (taken.has(id)) id++;
  const shell = (await readGuestFile(rootfs, "/etc/shells"))?.includes("/bin/bash") ? "/bin/bash" : "/bin/sh";
  await append("/etc/passwd", passwd, `${GUEST.user}:x:${id}:${id}::${GUEST.home}:${shell}`, 0o644);
  if (!group.split("\n").some((l) => l.startsWith(`${GUEST.user}:`))) await append("/etc/group", group, `${GUEST.user}:x:${id}:`, 0o644);
  const shadow = await readGuestFile(rootfs, "/etc/shadow");
  if (shadow !== undefined) await append("/etc/shadow", shadow, `${GUEST.user}:!:19000:0:99999:7:::`, 0o640);
  return { uid: id, gid: id };
}

/**
 * Adds what locale2b puts into every guest to a root: envd and its Node, the
 * init, the files the runtimes fill (hostname, hosts, resolv.conf), the
 * sandbox user and its home. Files of an older build of these are replaced.
 */
export async function provisionGuest(imagesDir: string, rootfs: string, log?: (line: string) => void): Promise<void> {
  const [bundle, init] = await Promise.all([ensureEnvdBundle(imagesDir, { log }), ensureInitBinary(imagesDir, log)]);
  // envd's Node, bundle and the libraries they load (the image's C library, if any, is not used):
  // a fresh /opt/locale2b, so nothing of an older one (or of what a build put there) stays.
  await installGuestRuntime(rootfs, await ensureGuestRuntime(imagesDir, bundle, { log }));
  // What the runtimes mount over (/proc, /dev, ...): an image made `FROM scratch` may not have them.
  await addMountPoints(rootfs);
  await writeGuestBasics(rootfs, init);
  const user = await ensureSandboxUser(rootfs);
  // /home for everyone (an image may have none: guestMkdir would make it with the home's own mode).
  await guestMkdir(rootfs, posix.dirname(GUEST.home), 0o755);
  const home = await guestMkdir(rootfs, GUEST.home, 0o750);
  const st = await stat(home);
  if (st.uid !== user.uid) await chown(home, user.uid, user.gid);
}

/**
 * Moves a finished work folder into place as the image `key` (packing
 * rootfs.ext4 first when `ext4`), writes its manifest, and points
 * `<key>.current` at it.
 */
export async function publishImage(
  imagesDir: string,
  work: { dir: string; rootfs: string },
  key: string,
  o: { ext4: boolean; diskSizeMB: number; description: unknown },
): Promise<NewImage> {
  const hash = randomBytes(8).toString("hex");
  const rootfsBytes = await treeBytes(work.rootfs);
  let imageBytes = 0;
  if (o.ext4) imageBytes = (await packExt4(work.rootfs, join(work.dir, "rootfs.ext4"), o.diskSizeMB)).imageBytes;
  const manifest: TemplateManifest = { name: key, hash, builtAt: new Date().toISOString(), definition: o.description, rootfsBytes, imageBytes };
  await writeFile(join(work.dir, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  await chmod(work.dir, 0o700);
  const id = `${key}-${hash}`;
  const dir = join(imagesDir, "templates", id);
  await rename(work.dir, dir);
  await setCurrent(imagesDir, key, id);
  return { key, dir, rootfsBytes };
}

/** Images of pulled base images (`@oci-…`) not used as a base for this long are removed. */
const BASE_IMAGE_IDLE_MS = 7 * 24 * 3600_000;

/**
 * Removes the images of template builds whose server is gone (a data dir
 * deleted with its templates: tests, a reinstall) or that this server no
 * longer has (`known`), and pulled base images unused for a week. Images of
 * another live server (its data dir is there) are never touched, nor any a
 * sandbox or snapshot still uses (removeImage). Returns the removed keys.
 */
export async function removeOrphanImages(imagesDir: string, dataDir: string, known: (buildId: string) => boolean | Promise<boolean>, log?: (line: string) => void): Promise<string[]> {
  const templates = join(imagesDir, "templates");
  const removed: string[] = [];
  for (const n of await readdir(templates).catch(() => [] as string[])) {
    const m = /^(@[0-9a-z-]+)-([0-9a-f]{16})$/.exec(n);
    if (!m) continue;
    const key = m[1]!;
    let owner: string | undefined;
    let buildId: string | undefined;
    let builtAt = 0;
    try {
      const manifest = JSON.parse(await readFile(join(templates, n, "manifest.json"), "utf8")) as TemplateManifest;
      const d = manifest.definition as { owner?: unknown; buildId?: unknown } | undefined;
      owner = typeof d?.owner === "string" ? d.owner : undefined;
      buildId = typeof d?.buildId === "string" ? d.buildId : undefined;
      builtAt = (await stat(join(templates, n))).mtimeMs;
    } catch {
      continue; // not complete yet, or not ours
    }
    const orphan = key.startsWith("@oci-")
      ? Date.now() - builtAt > BASE_IMAGE_IDLE_MS
      : owner === undefined
        ? Date.now() - builtAt > 3600_000 // made before images named their server: left an hour to whoever may use it
        : !serverLives(owner) || (owner === dataDir && buildId !== undefined && !(await known(buildId)));
    if (!orphan) continue;
    const why = key.startsWith("@oci-") ? "a base image unused for a week" : `its server's template is gone${owner ? ` (${owner})` : ""}`;
    const kept = await removeImage(imagesDir, key);
    if (kept.length) {
      log?.(`kept image ${key} (${why}): still used by ${imageHolders(join(templates, n)).slice(0, 3).join(", ")}`);
      continue;
    }
    removed.push(key);
    log?.(`removed image ${key} (${why})`);
  }
  return removed;
}

/** Whether the data dir of the server that built an image is still there (its SQLite store, or with Postgres its activity database). */
function serverLives(dataDir: string): boolean {
  return existsSync(join(dataDir, DB_FILE)) || existsSync(join(dataDir, ACTIVITY_DB_FILE));
}

/**
 * Removes the image `key`: its `.current` (no new sandbox starts on it) and
 * every folder of it that no sandbox, build sandbox, pause to disk or
 * snapshot uses (image-refs.ts). Returns the folders kept because one does:
 * removeOrphanImages takes them once unused.
 */
export async function removeImage(imagesDir: string, key: string): Promise<string[]> {
  const templates = join(imagesDir, "templates");
  const names = await readdir(templates).catch(() => [] as string[]);
  const prefix = `${key}-`;
  const kept: string[] = [];
  await rm(join(templates, `${key}.current`), { force: true });
  for (const n of names) {
    if (!n.startsWith(prefix) || !/^[0-9a-f]{16}$/.test(n.slice(prefix.length))) continue;
    if (imageHeld(join(templates, n))) kept.push(n);
    else await rm(join(templates, n), { recursive: true, force: true });
  }
  return kept;
}
