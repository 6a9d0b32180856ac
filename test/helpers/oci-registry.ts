// Registries and images for the image-pull tests, all real: Debian's
// docker-registry (distribution 2.8) on loopback, with htpasswd users or
// open, images built with umoci from host files and pushed with skopeo.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { createServer } from "node:net";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { findExecutable } from "../../control-plane/host/executables.js";

/** Tool → Debian package. busybox must be the static one (it runs alone in a test image). */
const PACKAGES: Record<string, string> = { skopeo: "skopeo", umoci: "umoci", "docker-registry": "docker-registry", htpasswd: "apache2-utils", "busybox-static": "busybox-static" };

function hasPackage(pkg: string): boolean {
  return spawnSync("dpkg-query", ["-W", "-f=${Status}", pkg], { encoding: "utf8" }).stdout === "install ok installed";
}

function present(tool: string): boolean {
  return tool === "busybox-static" ? hasPackage("busybox-static") : findExecutable(tool) !== undefined;
}

/** Installs what is missing (root and apt-get); returns why the tests cannot run, or undefined. */
export function ensureTestTools(extra: Record<string, string> = {}): string | undefined {
  const wanted = { ...PACKAGES, ...extra };
  const missing = () => Object.keys(wanted).filter((t) => !present(t));
  if (missing().length && process.getuid?.() === 0 && findExecutable("apt-get")) {
    const pkgs = missing().map((t) => wanted[t]!);
    const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    const install = () => spawnSync("apt-get", ["install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300", ...pkgs], { stdio: "ignore", env });
    if (install().status !== 0) {
      spawnSync("apt-get", ["update", "-q"], { stdio: "ignore", env });
      install();
    }
    // The package starts a registry on :5000 where systemd runs: the tests start their own, on loopback.
    if (pkgs.includes("docker-registry") && findExecutable("systemctl")) spawnSync("systemctl", ["disable", "--now", "docker-registry"], { stdio: "ignore" });
  }
  const still = missing();
  if (still.length) return `needs ${still.map((t) => wanted[t]).join(", ")} (apt-get install ${still.map((t) => wanted[t]).join(" ")}, as root)`;
  if (process.getuid?.() !== 0) return "needs root (umoci keeps file owners and setuid bits only as root)";
  return undefined;
}

export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const port = (srv.address() as { port: number }).port;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

export interface TestRegistry {
  host: string;
  /** Requests the registry served, from its access log: "GET /v2/team/app/manifests/v1". */
  requests(): string[];
  stop(): Promise<void>;
}

/** A registry on 127.0.0.1, plain HTTP, storing under `dir`; with htpasswd (bcrypt) users when given. */
export async function startRegistry(dir: string, users?: Record<string, string>): Promise<TestRegistry> {
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  let auth = "";
  if (users) {
    const file = join(dir, "htpasswd");
    for (const [i, [user, password]] of Object.entries(users).entries()) {
      // -i: the password from stdin, not argv
      const r = spawnSync("htpasswd", [...(i === 0 ? ["-c"] : []), "-i", "-B", file, user], { input: password, encoding: "utf8" });
      if (r.status !== 0) throw new Error(`htpasswd: ${r.stderr}`);
    }
    auth = `auth:\n  htpasswd:\n    realm: test\n    path: ${file}\n`;
  }
  const config = join(dir, "config.yml");
  writeFileSync(config, `version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, "storage")}\nhttp:\n  addr: ${host}\n${auth}`);
  const logFile = join(dir, "registry.log");
  writeFileSync(logFile, "");
  const child: ChildProcess = spawn("docker-registry", ["serve", config], { stdio: ["ignore", "pipe", "pipe"] });
  const chunks: string[] = [];
  const keep = (b: Buffer) => chunks.push(b.toString("utf8"));
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  for (let i = 0; ; i++) {
    try {
      await fetch(`http://${host}/v2/`);
      break;
    } catch {
      if (child.exitCode !== null || i > 200) throw new Error(`docker-registry did not start: ${chunks.join("")}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    host,
    requests: () =>
      chunks
        .join("")
        .split("\n")
        .map((l) => /"(GET|HEAD|PUT|POST|PATCH|DELETE) (\S+) HTTP\/[\d.]+"/.exec(l))
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => `${m[1]} ${m[2]}`),
    stop: async () => {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
      writeFileSync(logFile, chunks.join(""));
    },
  };
}

function must(cmd: string, args: string[], opts: { input?: string } = {}): string {
  const r = spawnSync(cmd, args, { encoding: "utf8", input: opts.input });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr || r.error?.message}`);
  return r.stdout;
}

/** An OCI layout `layout` to build tagged images in with umoci. */
export class ImageBuilder {
  constructor(
    readonly layout: string,
    private readonly work: string,
  ) {
    mkdirSync(work, { recursive: true });
    must("umoci", ["init", "--layout", layout]);
  }

  /** A new empty image `tag` (no layers, linux/amd64). */
  create(tag: string): this {
    must("umoci", ["new", "--image", `${this.layout}:${tag}`]);
    return this;
  }

  /** A layer: `fill` changes the image's root as unpacked now; umoci records the difference (deletions as whiteouts). */
  layer(tag: string, fill: (root: string) => void): this {
    const bundle = join(this.work, `bundle-${Date.now()}-${Math.random().toString(16).slice(2)}`);
    must("umoci", ["unpack", "--image", `${this.layout}:${tag}`, bundle]);
    fill(join(bundle, "rootfs"));
    must("umoci", ["repack", "--image", `${this.layout}:${tag}`, bundle]);
    must("rm", ["-rf", bundle]);
    return this;
  }

  /** A layer made of `dir` exactly as it is (tar of its contents: e.g. an opaque whiteout .wh..wh..opq). */
  rawLayer(tag: string, dir: string): this {
    const tar = join(this.work, `layer-${Date.now()}.tar`);
    must("tar", ["--numeric-owner", "-C", dir, "-cf", tar, "."]);
    must("umoci", ["raw", "add-layer", "--image", `${this.layout}:${tag}`, tar]);
    return this;
  }

  config(tag: string, c: { env?: string[]; workdir?: string; user?: string; entrypoint?: string[]; cmd?: string[]; architecture?: string }): this {
    const args = ["config", "--image", `${this.layout}:${tag}`];
    for (const e of c.env ?? []) args.push("--config.env", e);
    if (c.workdir) args.push("--config.workingdir", c.workdir);
    if (c.user) args.push("--config.user", c.user);
    for (const e of c.entrypoint ?? []) args.push("--config.entrypoint", e);
    for (const e of c.cmd ?? []) args.push("--config.cmd", e);
    if (c.architecture) args.push("--architecture", c.architecture);
    must("umoci", args);
    return this;
  }

  /** An index `tag` over images `tags`, each with the platform given (what `docker buildx` pushes for multi-arch). */
  index(tag: string, entries: { tag: string; architecture: string }[]): this {
    const indexFile = join(this.layout, "index.json");
    const index = JSON.parse(readFileSync(indexFile, "utf8")) as { manifests: { digest: string; size: number; mediaType: string; annotations?: Record<string, string> }[] };
    const manifests = entries.map((e) => {
      const m = index.manifests.find((d) => d.annotations?.["org.opencontainers.image.ref.name"] === e.tag)!;
      return { mediaType: m.mediaType, digest: m.digest, size: m.size, platform: { os: "linux", architecture: e.architecture } };
    });
    const blob = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests }));
    const hex = createHash("sha256").update(blob).digest("hex");
    writeFileSync(join(this.layout, "blobs", "sha256", hex), blob);
    index.manifests.push({ mediaType: "application/vnd.oci.image.index.v1+json", digest: `sha256:${hex}`, size: blob.length, annotations: { "org.opencontainers.image.ref.name": tag } });
    writeFileSync(indexFile, JSON.stringify(index));
    return this;
  }

  /** skopeo copy to `dest` (host/repo:tag) over plain HTTP; `extra` e.g. zstd compression. */
  push(tag: string, dest: string, creds?: string, extra: string[] = []): this {
    const args = ["copy", "--all", "--dest-tls-verify=false", ...(creds ? ["--dest-creds", creds] : []), ...extra, `oci:${this.layout}:${tag}`, `docker://${dest}`];
    must("skopeo", ["--insecure-policy", ...args]);
    return this;
  }
}
