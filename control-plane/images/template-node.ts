// The sandbox user's Node, for a template with `node:`: the server's Node
// binary at /usr/local/bin/node (a copy of its own, apart from envd's at
// GUEST.node, so the user may replace or remove it) and the definition's
// `node.packages` laid out as `npm install -g` would as root:
// /usr/local/lib/node_modules/<name>, bin links in /usr/local/bin. Only
// self-contained packages (npm, yarn, pnpm, ...: dependencies bundled in the
// tarball) can go in this way, and their install scripts are not run.
import { lstat, mkdir, readdir, readFile, symlink, unlink, chmod } from "node:fs/promises";
import { join, posix } from "node:path";
import type { NpmTarball } from "./npm-tarballs.js";
import { BuildStepError, mustRun, requireTool } from "./template-exec.js";
import { guestMkdir, guestPath, removeTree, writeGuestFile } from "./template-fs.js";

export const USER_NODE = "/usr/local/bin/node";
const GLOBAL_MODULES = "/usr/local/lib/node_modules";
const GLOBAL_BIN = "/usr/local/bin";
const BIN_NAME = /^[A-Za-z0-9@][A-Za-z0-9@._-]*$/;

interface PackageJson {
  name?: unknown;
  version?: unknown;
  bin?: unknown;
  dependencies?: unknown;
}

/** Puts the user's Node and the packages into `rootfs`; `workDir` (outside it) takes the unpacked tarballs. Returns the bin links made. */
export async function installUserNode(rootfs: string, nodeBinary: string, tarballs: NpmTarball[], workDir: string): Promise<string[]> {
  await writeGuestFile(rootfs, USER_NODE, { from: nodeBinary, mode: 0o755 });
  await link(rootfs, posix.join(GLOBAL_BIN, "nodejs"), "node"); // as in Node's Docker images
  const bins: string[] = [];
  for (const [i, t] of tarballs.entries()) {
    const unpacked = join(workDir, `npm-${i}`);
    await mkdir(unpacked, { recursive: true });
    bins.push(...(await installPackage(rootfs, t, unpacked)));
  }
  return bins;
}

async function installPackage(rootfs: string, t: NpmTarball, unpacked: string): Promise<string[]> {
  const step = `install ${t.spec} for the user's Node`;
  const fail = (why: string): never => {
    throw new BuildStepError(step, why);
  };
  // GNU tar keeps members inside the folder (no '..', no absolute names, links made last).
  await mustRun(step, requireTool("tar"), ["-xzf", t.file, "-C", unpacked, "--no-same-owner", "--no-same-permissions"]);
  await mustRun(step, "chmod", ["-R", "u+rwX,go+rX,go-w", unpacked]);
  const top = await readdir(unpacked);
  if (top.length !== 1 || !(await lstat(join(unpacked, top[0]!))).isDirectory()) fail(`${t.file} holds ${top.join(", ") || "nothing"}, expected one folder`);
  const dir = join(unpacked, top[0]!);
  const pj = join(dir, "package.json");
  if (!(await lstat(pj).catch(() => undefined))?.isFile()) fail("the tarball has no package.json file");
  let meta: PackageJson;
  try {
    meta = JSON.parse(await readFile(pj, "utf8")) as PackageJson;
  } catch {
    return fail("its package.json is not JSON");
  }
  if (meta.name !== t.name || meta.version !== t.version) fail(`the tarball is ${String(meta.name)}@${String(meta.version)}`);
  const deps = meta.dependencies && typeof meta.dependencies === "object" ? Object.keys(meta.dependencies) : [];
  const missing = [];
  for (const d of deps) if (!(await lstat(join(dir, "node_modules", d, "package.json")).catch(() => undefined))) missing.push(d);
  if (missing.length) {
    fail(`it depends on ${missing.slice(0, 5).join(", ")}${missing.length > 5 ? ", ..." : ""}, not bundled in its tarball: node.packages takes self-contained packages only (npm, yarn, pnpm); install others in a sandbox`);
  }

  const dest = posix.join(GLOBAL_MODULES, t.name);
  await guestMkdir(rootfs, posix.dirname(dest));
  const host = await guestPath(rootfs, dest);
  await removeTree(host);
  await mustRun(step, "cp", ["-a", "--reflink=auto", "--", dir, host]);
  await mustRun(step, "chown", ["-R", "-h", "0:0", host]);

  const made: string[] = [];
  for (const [name, target] of binEntries(t.name, meta.bin)) {
    const rel = posix.normalize(target);
    if (!BIN_NAME.test(name) || rel.startsWith("../") || rel === ".." || posix.isAbsolute(rel)) fail(`its bin entry ${JSON.stringify(name)}: ${JSON.stringify(target)} points outside the package`);
    // Made executable, as npm does: a regular file inside the tree, never through a link.
    const file = await guestPath(rootfs, posix.join(dest, rel));
    if (!(await lstat(file).catch(() => undefined))?.isFile()) fail(`its bin entry ${JSON.stringify(name)}: ${rel} is not a file in the package`);
    await chmod(file, 0o755);
    await link(rootfs, posix.join(GLOBAL_BIN, name), posix.relative(GLOBAL_BIN, posix.join(dest, rel)));
    made.push(name);
  }
  return made;
}

/** package.json's `bin`: a path (the bin takes the package's name, without its scope) or {name: path}. */
function binEntries(pkg: string, bin: unknown): [string, string][] {
  if (typeof bin === "string") return [[pkg.replace(/^@[^/]+\//, ""), bin]];
  if (bin && typeof bin === "object") return Object.entries(bin).filter((e): e is [string, string] => typeof e[1] === "string");
  return [];
}

/** A symlink at guest path `at` (whatever was there replaced, never followed) pointing to `target`. */
async function link(rootfs: string, at: string, target: string): Promise<void> {
  await guestMkdir(rootfs, posix.dirname(at));
  const host = await guestPath(rootfs, at);
  if (await lstat(host).catch(() => undefined)) await unlink(host);
  await symlink(target, host);
}
