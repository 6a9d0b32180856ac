// The Kubernetes binaries and the pause image the test cluster runs: built once per version by
// scripts/k8s/build-binaries.sh into ~/.cache/locale2b/k8s (outside the clone), and what else the host needs.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { homedir } from "node:os";
import { existsSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { commandExists } from "./host.js";
import { CNI_BIN_DIR } from "./node.js";

/** The checkout (scripts/k8s/cluster.sh runs a bundle of this code from elsewhere and says where). */
export const REPO = process.env.LOCALE2B_REPO || fileURLToPath(new URL("../../..", import.meta.url));
export const BUILD_SCRIPT = join(REPO, "scripts", "k8s", "build-binaries.sh");
export const SETUP_SCRIPT = join(REPO, "scripts", "k8s", "setup-host.sh");

export interface K8sArtifacts {
  dir: string;
  binDir: string;
  pauseTar: string;
  pauseRef: string;
  /** kubectl of the same version as the cluster. */
  kubectl: string;
}

function artifacts(dir: string): K8sArtifacts {
  return {
    dir,
    binDir: join(dir, "bin"),
    pauseTar: join(dir, "images", "pause.tar"),
    pauseRef: readFileSync(join(dir, "pause.ref"), "utf8").trim(),
    kubectl: join(dir, "bin", "kubectl"),
  };
}

/** The build script's cache directory for this checkout (the same key the script computes), if complete. */
export function cachedArtifacts(): K8sArtifacts | undefined {
  const version = process.env.LOCALE2B_K8S_VERSION || "1.36.1";
  const hash = createHash("sha256");
  for (const f of ["build-binaries.sh", "pack-image.sh"]) hash.update(readFileSync(join(REPO, "scripts", "k8s", f)));
  const dir = join(cacheRoot(), "k8s", `v${version}-${hash.digest("hex").slice(0, 12)}`);
  return existsSync(join(dir, ".complete")) ? artifacts(dir) : undefined;
}

/** Where the build scripts cache what they build (outside the clone). */
export function cacheRoot(): string {
  return process.env.LOCALE2B_CACHE_DIR || join(homedir(), ".cache", "locale2b");
}

/**
 * Runs a build script of scripts/k8s (Go on PATH; its progress on stderr when `progress`): the last line
 * it prints, which names what it built, or an error with the end of its output.
 */
export function runBuildScript(script: string, opts: { progress?: boolean } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", [script], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PATH: `${process.env.PATH}:/usr/local/go/bin` } });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => {
      err = (err + d.toString()).slice(-8000);
      if (opts.progress) process.stderr.write(d);
    });
    child.on("error", reject);
    child.on("exit", (code) => {
      if (code === 0) resolve(out.trim().split("\n").pop() ?? "");
      else reject(new Error(`scripts/k8s/${basename(script)} failed (exit ${code}):\n${err.trim().split("\n").slice(-15).join("\n")}`));
    });
  });
}

/**
 * Runs the build script: at once when its cache is complete, else a cold build (about 15-25 minutes of
 * one core; progress on stderr when `progress`).
 */
export async function buildBinaries(opts: { progress?: boolean } = {}): Promise<K8sArtifacts> {
  const dir = await runBuildScript(BUILD_SCRIPT, opts);
  if (!existsSync(join(dir, ".complete"))) throw new Error(`scripts/k8s/build-binaries.sh named ${dir || "nothing"}, which is not a complete build`);
  return artifacts(dir);
}

/** Why a test cluster cannot run on this machine, or undefined. (The binaries are built on demand.) */
export function k8sMissing(): string | undefined {
  if (process.platform !== "linux") return "Linux only";
  if (process.getuid?.() !== 0) return "needs root (network namespaces, cgroups, mounts)";
  const missing = ["etcd", "containerd", "ctr", "runc", "containerd-shim-runc-v2", "openssl", "nsenter", "ip", "iptables", "iptables-save", "conntrack"].filter((c) => !commandExists(c));
  for (const p of ["bridge", "host-local", "loopback"]) if (!existsSync(join(CNI_BIN_DIR, p))) missing.push(`${CNI_BIN_DIR}/${p}`);
  if (missing.length) return `missing ${missing.join(", ")}: run scripts/k8s/setup-host.sh as root`;
  if (!cachedArtifacts() && !commandExists("go")) return "no Go toolchain to build the Kubernetes binaries with (scripts/k8s/build-binaries.sh needs Go >= 1.26)";
  return undefined;
}

/**
 * Why a test that needs the cluster's binaries cannot run here (after
 * `missing`, the test's own reason, if any), else undefined once they are
 * built (the first run builds them: about 15 minutes on 2 cores, cached).
 */
export async function k8sSkipReason(missing: string | undefined): Promise<string | undefined> {
  if (missing) return missing;
  if (process.env.LOCALE2B_K8S_NO_BUILD === "1" && !cachedArtifacts()) {
    return "the Kubernetes binaries are not built and LOCALE2B_K8S_NO_BUILD=1 (run scripts/k8s/build-binaries.sh)";
  }
  try {
    await buildBinaries({ progress: true });
  } catch (e) {
    return `the Kubernetes binaries could not be built: ${(e as Error).message}`;
  }
  return undefined;
}
