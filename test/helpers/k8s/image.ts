// Container images without Docker or a registry: a directory becomes a one-layer image tar
// (scripts/k8s/pack-image.sh, the `docker save` layout), which `importImage` loads into every node's
// containerd. Pods then run it with `imagePullPolicy: Never`.
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REPO } from "./binaries.js";
import { run } from "./host.js";

export interface ImageSpec {
  /** The root filesystem to pack (copied as it is, owned by root). */
  rootfs: string;
  /** A name with a registry-looking host, e.g. locale2b.local/web:1, so containerd keeps it as written. */
  ref: string;
  out: string;
  entrypoint?: string[];
  cmd?: string[];
  env?: string[];
  workdir?: string;
}

export async function buildImage(spec: ImageSpec): Promise<string> {
  const args = ["--rootfs", spec.rootfs, "--ref", spec.ref, "--out", spec.out];
  if (spec.entrypoint) args.push("--entrypoint", JSON.stringify(spec.entrypoint));
  if (spec.cmd) args.push("--cmd", JSON.stringify(spec.cmd));
  if (spec.env) args.push("--env", JSON.stringify(spec.env));
  if (spec.workdir) args.push("--workdir", spec.workdir);
  await run("bash", [join(REPO, "scripts", "k8s", "pack-image.sh"), ...args]);
  return spec.out;
}

export const BUSYBOX = "/bin/busybox";

/** Why busybox images cannot be made here, or undefined: they need a static busybox (Debian busybox-static). */
export function busyboxMissing(): string | undefined {
  if (!existsSync(BUSYBOX)) return `no ${BUSYBOX} (Debian package busybox-static)`;
  const file = execFileSync("file", ["-L", BUSYBOX], { encoding: "utf8" });
  return file.includes("statically linked") ? undefined : `${BUSYBOX} is not statically linked (install busybox-static)`;
}

/**
 * A tiny image with a static busybox and all its applets (sh, httpd, wget, nc, ...) plus `files`
 * (path in the image -> content). Returns the tar's path.
 */
export async function busyboxImage(opts: { ref: string; out: string; files?: Record<string, string>; entrypoint?: string[]; cmd?: string[] }): Promise<string> {
  const root = mkdtempSync(join(tmpdir(), "locale2b-k8s-image-"));
  try {
    for (const d of ["bin", "tmp", "etc", "www"]) mkdirSync(join(root, d));
    copyFileSync(BUSYBOX, join(root, "bin", "busybox"));
    for (const applet of execFileSync(BUSYBOX, ["--list"], { encoding: "utf8" }).split("\n")) {
      if (applet && applet !== "busybox") symlinkSync("busybox", join(root, "bin", applet));
    }
    writeFileSync(join(root, "etc", "passwd"), "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n");
    writeFileSync(join(root, "etc", "group"), "root:x:0:\nnogroup:x:65534:\n");
    for (const [path, content] of Object.entries(opts.files ?? {})) {
      mkdirSync(join(root, path, ".."), { recursive: true });
      writeFileSync(join(root, path), content, { mode: 0o755 });
    }
    return await buildImage({ rootfs: root, ref: opts.ref, out: opts.out, entrypoint: opts.entrypoint, cmd: opts.cmd });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
