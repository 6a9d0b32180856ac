// skopeo (fetches images from registries) and umoci (unpacks OCI layers),
// Debian's packages of both. The first pull that finds one missing installs
// it with apt-get when the server runs as root on a Debian-like host, as the
// base template's build tools are (first-use.ts); scripts/setup-host
// installs them too.
import type { Logger } from "pino";
import { findExecutable } from "../../host/executables.js";
import { ImagePullError } from "./errors.js";
import { runTool, ToolFailed } from "./tool-run.js";

export interface PullTools {
  skopeo: string;
  umoci: string;
}

const PACKAGES = { skopeo: "skopeo", umoci: "umoci" } as const;

function find(): Partial<PullTools> {
  return { skopeo: findExecutable("skopeo"), umoci: findExecutable("umoci") };
}

let installing: Promise<void> | undefined;

async function aptInstall(pkgs: string[], log: Logger, signal?: AbortSignal): Promise<void> {
  const apt = findExecutable("apt-get");
  if (!apt || process.getuid?.() !== 0) return;
  log.info({ packages: pkgs }, `installing ${pkgs.join(", ")} (apt-get) for image pulls`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  // Another apt-get (a second pull, the host's own) may hold dpkg's lock: wait for it rather than fail.
  const install = () => runTool(apt, ["install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=120", ...pkgs], { env, signal });
  try {
    await install();
  } catch (err) {
    if (!(err instanceof ToolFailed)) throw err;
    await runTool(apt, ["update", "-q"], { env, signal }).catch(() => undefined);
    await install().catch((e) => log.warn({ err: e instanceof Error ? e.message : String(e) }, "apt-get install failed"));
  }
}

/** The two tools' paths, installing them first when missing and possible; else a setup error saying what to install. */
export async function pullTools(log: Logger, signal?: AbortSignal): Promise<PullTools> {
  let found = find();
  const missing = () => (Object.keys(PACKAGES) as (keyof PullTools)[]).filter((t) => !found[t]).map((t) => PACKAGES[t]);
  if (missing().length) {
    installing ??= aptInstall(missing(), log, signal).finally(() => (installing = undefined));
    await installing;
    found = find();
  }
  if (missing().length) {
    throw new ImagePullError("setup", `image pulls need ${missing().join(" and ")}, which ${missing().length > 1 ? "are" : "is"} not installed: apt-get install ${missing().join(" ")} (or run scripts/setup-host as root)`);
  }
  return found as PullTools;
}
