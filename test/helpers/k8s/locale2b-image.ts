// The locale2b image for the test cluster, packed from a directory (no registry, so no FROM image for
// deploy/Dockerfile): the app (package.json, dist/, rootfs/, deploy/node-entrypoint.sh and the production
// node_modules) at /opt/locale2b, as in the real image, and the userland borrowed from the host the pods
// run on, which the test overlay mounts read-only at /host: /usr -> /host/usr (Node, and every host tool
// the node agent runs: ip, nft, mount, nsenter, mkfs.ext4, tar, cp...), /bin, /sbin, /lib, /lib64 ->
// usr/... (Debian's merged /usr), and /etc of links into /host/etc but for the files the kubelet
// provides (hosts, hostname, resolv.conf).
//
// Why this and not `chroot /host`: the pods then run exactly as with the real image: the same paths
// (/opt/locale2b, /var/lib/locale2b, /sys/fs/cgroup, /run/netns), the same hostPath volumes and
// entrypoint from deploy/kubernetes, the tools found on the same PATH. A chroot would need the app inside
// the host's tree (a bind mount or a copy per start) and would bypass the DaemonSet's own volumes. The
// host has what the node needs because it runs the project's tests (scripts/setup-host); the test test
// thereby does not check the Dockerfile's package list, only the manifests and the app.
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { REPO } from "./binaries.js";
import { buildImage } from "./image.js";

/** Files of /etc the kubelet or runc put into every container: not links to the host's. */
const ETC_OWN = new Set(["hosts", "hostname", "resolv.conf", "mtab"]);

/** The production packages' folders (npm ls --omit=dev), outermost only. */
function productionPackages(): string[] {
  const out = execFileSync("npm", ["ls", "--omit=dev", "--parseable", "--all"], { cwd: REPO, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  const dirs = [...new Set(out.split("\n").filter((p) => p && p !== REPO))].sort();
  return dirs.filter((d, i) => !dirs.slice(0, i).some((up) => d.startsWith(up + "/")));
}

/** Builds the image tar `out` as `ref`; `npm run build` must have run. */
export async function locale2bImage(opts: { ref: string; out: string }): Promise<string> {
  const root = mkdtempSync(join(tmpdir(), "locale2b-k8s-l2b-image-"));
  try {
    const app = join(root, "opt", "locale2b");
    mkdirSync(join(app, "deploy"), { recursive: true });
    copyFileSync(join(REPO, "package.json"), join(app, "package.json"));
    cpSync(join(REPO, "dist"), join(app, "dist"), { recursive: true });
    cpSync(join(REPO, "rootfs"), join(app, "rootfs"), { recursive: true });
    copyFileSync(join(REPO, "deploy", "node-entrypoint.sh"), join(app, "deploy", "node-entrypoint.sh"));
    chmodSync(join(app, "deploy", "node-entrypoint.sh"), 0o755);
    for (const pkg of productionPackages()) {
      const to = join(app, relative(REPO, pkg));
      mkdirSync(dirname(to), { recursive: true });
      cpSync(pkg, to, { recursive: true, verbatimSymlinks: true });
    }
    for (const d of ["host", "tmp", "var/lib", "var/cache", "run", "proc", "sys", "dev", "root", "etc"]) mkdirSync(join(root, d), { recursive: true });
    chmodSync(join(root, "tmp"), 0o1777);
    symlinkSync("/host/usr", join(root, "usr"));
    for (const d of ["bin", "sbin", "lib", "lib64"]) symlinkSync(`usr/${d}`, join(root, d));
    for (const name of readdirSync("/etc")) if (!ETC_OWN.has(name)) symlinkSync(`/host/etc/${name}`, join(root, "etc", name));
    return await buildImage({ rootfs: root, ref: opts.ref, out: opts.out, env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NODE_ENV=production"] });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
