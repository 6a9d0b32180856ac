// Where guest images live, shared by the template builder, the kernel build
// and the runtimes that boot them (process with a template rootfs, qemu,
// firecracker). Nothing here builds anything.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { resolveDataDir } from "../config.js";
import { setting } from "../settings.js";

/**
 * The image cache: `$LOCALE2B_IMAGES_DIR`, else `images/` in the default data
 * dir (`/var/lib/locale2b/images` as root), whatever --data-dir a server uses:
 * images are per host, not per server.
 *   layers/<name>-<hash16>/                  debootstrap + packages + `run` (template-layer.ts)
 *   envd/<hash16>/, init/<hash16>/           the envd bundle and the static guest init, by source hash
 *   node-hash.json                           the Node binary's content hash, remembered
 *   templates/<name>-<hash16>/rootfs/        the root filesystem as a directory (process runtime)
 *   templates/<name>-<hash16>/rootfs.ext4    the same, packed (VM runtimes' read-only base disk)
 *   templates/<name>-<hash16>/manifest.json  TemplateManifest
 *   templates/<name>-<hash16>/.refs/         the sandboxes and snapshots that use this build (image-refs.ts)
 *   templates/<name>.current                 text file: the `<name>-<hash16>` last built
 *   kernels/<hash16>/vmlinux                 uncompressed ELF kernel with a PVH entry (qemu and firecracker)
 *   kernels/current                          text file: the `<hash16>` last built
 * Entries are built under a temporary name and renamed into place, so a
 * directory that exists is complete.
 */
export function imagesDir(env: NodeJS.ProcessEnv = process.env, dataDir?: string): string {
  return setting("LOCALE2B_IMAGES_DIR", env) || join(dataDir ?? resolveDataDir(undefined, env), "images");
}

/** Paths inside every template's root filesystem. */
export const GUEST = {
  /**
   * locale2b's own files (guest-runtime.ts): envd's Node, the envd bundle and the shared libraries
   * they load, so envd does not depend on the image's C library (musl, or none at all).
   */
  root: "/opt/locale2b",
  /** The dynamic loader and libraries envd's Node and native modules use (their PT_INTERP and DT_RPATH). */
  lib: "/opt/locale2b/lib",
  /** PID 1 in a VM; in the process runtime the namespace's first process. */
  init: "/sbin/locale2b-init",
  /**
   * The Node runtime envd runs on (GUEST_NODE in rootfs/init/init.h): locale2b's own copy of the
   * server's Node, apart from any the sandbox's user has (`node:` in a definition puts one at
   * /usr/local/bin/node), so envd keeps working when the user replaces or removes theirs.
   */
  node: "/opt/locale2b/node/bin/node",
  /** Node's flags for envd, as the init starts it (GUEST_NODE_FLAG in rootfs/init/init.h). */
  nodeFlags: ["--max-semi-space-size=2"],
  /** The envd bundle's entry (`node <nodeFlags> envd.js --listen … --user … --workdir …`). */
  envd: "/opt/locale2b/envd/envd.js",
  /** envd's own Unix socket inside the guest; the init bridges vsock / hybrid-vsock to it. */
  envdSocket: "/run/locale2b/envd.sock",
  user: "user",
  uid: 1000,
  home: "/home/user",
} as const;

export interface TemplateManifest {
  name: string;
  hash: string;
  builtAt: string;
  /** The definition as parsed, for `template list` and debugging. */
  definition: unknown;
  rootfsBytes: number;
  imageBytes: number;
}

export interface GuestImage {
  name: string;
  hash: string;
  dir: string;
  rootfsDir: string;
  rootfsImage: string;
  manifest: TemplateManifest;
}

/** The last built image of a template, or undefined when it was never built here. */
export function findTemplateImage(name: string, dir = imagesDir()): GuestImage | undefined {
  const templates = join(dir, "templates");
  let id: string;
  try {
    id = readFileSync(join(templates, `${name}.current`), "utf8").trim();
  } catch {
    return undefined;
  }
  return templateImageAt(join(templates, id), name);
}

/** The built image in the folder `dir` (`templates/<name>-<hash16>`), or undefined when it is not there (pruned, incomplete). */
export function templateImageAt(dir: string, name?: string): GuestImage | undefined {
  try {
    const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8")) as TemplateManifest;
    return { name: name ?? manifest.name, hash: manifest.hash, dir, rootfsDir: join(dir, "rootfs"), rootfsImage: join(dir, "rootfs.ext4"), manifest };
  } catch {
    return undefined;
  }
}

/** The guest kernel: `$LOCALE2B_KERNEL`, else the last one built into the cache, else undefined. */
export function findKernel(env: NodeJS.ProcessEnv = process.env, dir = imagesDir(env)): string | undefined {
  const explicit = setting("LOCALE2B_KERNEL", env);
  if (explicit) return existsSync(explicit) ? explicit : undefined;
  const kernels = join(dir, "kernels");
  try {
    const id = readFileSync(join(kernels, "current"), "utf8").trim();
    const path = join(kernels, id, "vmlinux");
    if (existsSync(path)) return path;
  } catch {
    // no current marker: fall back to the newest built kernel
  }
  try {
    const built = readdirSync(kernels)
      .map((d) => join(kernels, d, "vmlinux"))
      .filter((p) => existsSync(p))
      .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
    return built[0];
  } catch {
    return undefined;
  }
}
