import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rename, rm } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort, startHttpChild, type EnvdChild } from "./envd.js";

const run = promisify(execFile);

/** Where E2B's infra repository is looked for when LOCALE2B_BENCH_E2B_INFRA is not set. */
const DEFAULT_INFRA = "/work/.mirror/e2b-dev+infra/repo";

export type E2bEnvdBinary = { bin: string; label: string } | { skipped: string };

/** A git directory (bare or not) for `--git-dir`, or undefined. */
async function gitDir(path: string): Promise<string | undefined> {
  try {
    const { stdout } = await run("git", ["-C", path, "rev-parse", "--absolute-git-dir"]);
    return stdout.trim();
  } catch {
    return undefined;
  }
}

/**
 * E2B's Go envd (e2b-dev/infra, packages/envd), built at bench time and
 * cached outside this repository by commit:
 * ~/.cache/locale2b/e2b-envd/<commit>/envd. Nothing of its code is kept
 * here: the source is `git archive`d from a local copy of the repository
 * into the cache and built there with `go build` (CGO off).
 *
 * LOCALE2B_BENCH_E2B_ENVD: a prebuilt binary (no build).
 * LOCALE2B_BENCH_E2B_INFRA: the infra repository (a checkout or a bare git
 * dir; default /work/.mirror/e2b-dev+infra/repo), LOCALE2B_BENCH_E2B_REF
 * the commit to build (default HEAD).
 */
export async function e2bEnvdBinary(): Promise<E2bEnvdBinary> {
  if (process.getuid?.() !== 0) return { skipped: "E2B's envd runs commands as root: run the benchmark as root" };
  const prebuilt = process.env.LOCALE2B_BENCH_E2B_ENVD;
  if (prebuilt) {
    return existsSync(prebuilt) ? { bin: prebuilt, label: prebuilt } : { skipped: `LOCALE2B_BENCH_E2B_ENVD=${prebuilt} does not exist` };
  }
  const infra = process.env.LOCALE2B_BENCH_E2B_INFRA ?? DEFAULT_INFRA;
  const git = existsSync(infra) ? await gitDir(infra) : undefined;
  if (!git) return { skipped: `no e2b-dev/infra repository at ${infra} (set LOCALE2B_BENCH_E2B_INFRA, or LOCALE2B_BENCH_E2B_ENVD to a binary)` };
  let commit: string;
  try {
    commit = (await run("git", ["--git-dir", git, "rev-parse", `${process.env.LOCALE2B_BENCH_E2B_REF ?? "HEAD"}^{commit}`])).stdout.trim();
  } catch (err) {
    return { skipped: `cannot resolve ${process.env.LOCALE2B_BENCH_E2B_REF ?? "HEAD"} in ${git}: ${(err as Error).message.split("\n")[0]}` };
  }
  const dir = join(homedir(), ".cache", "locale2b", "e2b-envd", commit);
  const bin = join(dir, "envd");
  const label = `e2b-dev/infra ${commit.slice(0, 9)}`;
  if (existsSync(bin)) return { bin, label };

  try {
    await run("go", ["version"]);
  } catch {
    return { skipped: "Go is not installed (needed to build E2B's envd)" };
  }
  console.log(`building E2B's envd from ${label} into ${dir} (go build; the first time downloads its modules)`);
  await mkdir(dir, { recursive: true });
  const src = await mkdtemp(join(dir, "src-"));
  try {
    // packages/envd has `replace .../packages/shared => ../shared`.
    await new Promise<void>((resolve, reject) => {
      const archive = spawn("git", ["--git-dir", git, "archive", commit, "packages/envd", "packages/shared"], { stdio: ["ignore", "pipe", "inherit"] });
      const tar = spawn("tar", ["-x", "-C", src], { stdio: ["pipe", "inherit", "inherit"] });
      archive.stdout.pipe(tar.stdin);
      archive.once("error", reject);
      tar.once("error", reject);
      tar.once("close", (code) => (code === 0 ? resolve() : reject(new Error(`git archive | tar exited ${code}`))));
    });
    await run("go", ["build", "-o", `${bin}.tmp`, "."], {
      cwd: join(src, "packages", "envd"),
      env: { ...process.env, CGO_ENABLED: "0" },
      maxBuffer: 16 * 1024 * 1024,
    });
    await rename(`${bin}.tmp`, bin);
  } catch (err) {
    return { skipped: `go build of ${label} failed: ${(err as Error).message.slice(0, 500)}` };
  } finally {
    await rm(src, { recursive: true, force: true });
  }
  return { bin, label };
}

/**
 * Starts E2B's envd on a free port (its `-port` flag) outside Firecracker
 * (`-isnotfc`: no MMDS poll, no log exporter) without cgroups
 * (`-no-cgroups`), and waits for GET /health to answer 204. It needs no
 * /init: until one sets an access token, every call is allowed, and with no
 * Basic auth user it runs commands as root.
 */
export async function startE2bEnvd(bin: string, pollMs = 50): Promise<EnvdChild> {
  const port = await freePort();
  return startHttpChild({ name: "E2B envd", command: bin, args: ["-isnotfc", "-no-cgroups", "-port", String(port)], port, pollMs });
}
