// The final template's root filesystem: a copy of the cached layer plus
// what locale2b puts into every guest (envd's runtime under /opt/locale2b:
// its own copy of the host's Node, the envd bundle and the libraries they
// load; the guest init, hostname, the sandbox user's home) and, with
// `node:`, the user's Node and npm packages; checked in a chroot and packed
// into rootfs.ext4.
import { chown, stat } from "node:fs/promises";
import { join, posix } from "node:path";
import { installGuestRuntime, type GuestRuntime } from "./guest-runtime.js";
import { GUEST } from "./layout.js";
import type { NpmTarball } from "./npm-tarballs.js";
import type { TemplateDefinition } from "./template-definition.js";
import { BuildStepError, mustRun, requireTool } from "./template-exec.js";
import { guestMkdir, readPasswd, treeBytes, withChroot, writeGuestFile } from "./template-fs.js";
import { installUserNode, USER_NODE } from "./template-node.js";

export const HOSTNAME = "sandbox";

export interface AssembleInputs {
  def: TemplateDefinition;
  layerRootfs: string;
  /** Where the new rootfs goes (must not exist). */
  rootfs: string;
  /** The user's Node (`node:`) is a copy of this. */
  nodeBinary: string;
  /** envd's Node, bundle and libraries (guest-runtime.ts). */
  runtime: GuestRuntime;
  initBinary: string;
  /** `node.packages`, fetched (npm-tarballs.ts). */
  npmTarballs: NpmTarball[];
  /** Scratch space outside the rootfs (unpacked tarballs). */
  workDir: string;
}

/**
 * What every guest has of locale2b's besides envd's runtime: the init, the
 * files the runtimes fill (hostname, hosts, resolv.conf) and envd's socket
 * folder. Replaces what is there (never writes through a link).
 */
export async function writeGuestBasics(rootfs: string, initBinary: string): Promise<void> {
  await writeGuestFile(rootfs, GUEST.init, { from: initBinary, mode: 0o755 });
  await writeGuestFile(rootfs, "/etc/hostname", { content: `${HOSTNAME}\n`, mode: 0o644 });
  await writeGuestFile(rootfs, "/etc/hosts", {
    content: `127.0.0.1\tlocalhost\n127.0.1.1\t${HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n`,
    mode: 0o644,
  });
  // Empty: the runtime fills it (the VM's init from the kernel's network set-up, the process
  // runtime by binding the host's over it).
  await writeGuestFile(rootfs, "/etc/resolv.conf", { content: "", mode: 0o644 });
  await guestMkdir(rootfs, posix.dirname(GUEST.envdSocket));
}

/** Copies the layer and adds the guest's own files. Never modifies a layer file in place. */
export async function assembleRootfs(o: AssembleInputs): Promise<void> {
  const { def, rootfs } = o;
  // A real copy (reflinked where the file system can): the template's files are its own.
  await mustRun("copy the layer", "cp", ["-a", "--reflink=auto", "--", o.layerRootfs, rootfs]);
  // envd's Node: its own file (not a link to the user's), so nothing the user does to theirs reaches it.
  await installGuestRuntime(rootfs, o.runtime);
  await writeGuestBasics(rootfs, o.initBinary);
  if (def.node) await installUserNode(rootfs, o.nodeBinary, o.npmTarballs, o.workDir);
  for (const f of def.files) {
    await writeGuestFile(rootfs, f.path, { ...(f.from !== undefined ? { from: f.from } : { content: f.content ?? "" }), mode: f.mode });
  }
  // The user's home, after `files` so anything placed there is the user's too.
  const home = await guestMkdir(rootfs, `/home/${def.user}`, 0o750);
  await mustRun("own the user's home", "chown", ["-R", "-h", `${GUEST.uid}:${GUEST.uid}`, home]);
  await chown(home, GUEST.uid, GUEST.uid);
}

/** Checks the assembled tree: the user, the init, Node runs, envd's bundle loads (native modules included). */
export async function verifyRootfs(def: TemplateDefinition, rootfs: string): Promise<string> {
  const user = readPasswd(rootfs).get(def.user);
  if (!user) throw new BuildStepError("verify", `user '${def.user}' is missing from /etc/passwd`);
  if (user.uid !== GUEST.uid || user.gid !== GUEST.uid) throw new BuildStepError("verify", `user '${def.user}' has uid:gid ${user.uid}:${user.gid}, expected ${GUEST.uid}:${GUEST.uid}`);
  const init = await stat(join(rootfs, GUEST.init)).catch(() => undefined);
  if (!init?.isFile() || (init.mode & 0o111) === 0) throw new BuildStepError("verify", `${GUEST.init} is missing or not executable`);
  return withChroot(rootfs, async (sh) => {
    const version = (await sh("run Node in the image", `${GUEST.node} --version`)).trim();
    if (version !== process.version) throw new BuildStepError("verify", `${GUEST.node} --version printed ${version}, expected ${process.version}`);
    // Loading node-pty and xattr proves the native modules load; every library mapped then must be envd's own, none of the image's.
    const maps = await sh(
      "load envd's native modules in the image",
      `cd ${posix.dirname(GUEST.envd)} && ${GUEST.node} --input-type=module -e "import { createRequire } from 'node:module'; import { readFileSync } from 'node:fs'; const r = createRequire('${GUEST.envd}'); r('@lydell/node-pty'); r('@napi-rs/xattr'); console.log(readFileSync('/proc/self/maps', 'utf8'));"`,
      { tailBytes: 1 << 20 },
    );
    const foreign = [...new Set(maps.split("\n").map((l) => l.split(/\s+/)[5] ?? "").filter((f) => /\.so(\.|$)/.test(f) && !f.startsWith(`${GUEST.lib}/`)))];
    if (foreign.length) throw new BuildStepError("verify", `envd's Node loaded libraries of the image: ${foreign.join(", ")}; expected only ${GUEST.lib}'s`);
    await sh("run envd --help in the image", `${GUEST.node} ${GUEST.envd} --help >/dev/null`);
    if (def.node) {
      const user = (await sh("run the user's Node in the image", `${USER_NODE} --version`)).trim();
      if (user !== process.version) throw new BuildStepError("verify", `${USER_NODE} --version printed ${user}, expected ${process.version}`);
      // Each package in place; npm, when there, runs.
      for (const p of def.node.packages) await sh(`find ${p.spec} in the image`, `test -f /usr/local/lib/node_modules/${p.name}/package.json`);
      if (def.node.packages.some((p) => p.name === "npm")) await sh("run npm in the image", "npm --version --logs-max=0 >/dev/null");
    }
    return version;
  });
}

export interface PackResult {
  rootfsBytes: number;
  imageBytes: number;
  sizeMiB: number;
}

/** mkfs.ext4 -d: the tree into an ext4 image, no loop mount; size max(diskSizeMB, used × 1.3 + 256 MiB). */
export async function packExt4(rootfs: string, image: string, diskSizeMB: number, onLine?: (line: string) => void): Promise<PackResult> {
  const mkfs = requireTool("mkfs.ext4");
  const rootfsBytes = await treeBytes(rootfs);
  const MiB = 1024 * 1024;
  const sizeMiB = Math.max(diskSizeMB, Math.ceil((rootfsBytes * 1.3) / MiB) + 256);
  await mustRun("pack rootfs.ext4", mkfs, ["-q", "-F", "-d", `${rootfs}/`, "-L", "rootfs", "-E", "root_owner=0:0", image, `${sizeMiB}M`], { onLine });
  const imageBytes = (await stat(image)).size;
  return { rootfsBytes, imageBytes, sizeMiB };
}
