// The one place the control plane looks for a host program (ip, nft, runsc,
// qemu-system-x86_64, mkfs.ext4, debootstrap, ...).
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";

/**
 * Searched after PATH: where scripts/setup-host installs (/usr/local/bin,
 * ~/.local/bin), and the sbin folders, which users' PATHs (and sudo's) often
 * lack although iproute2, e2fsprogs and debootstrap live there.
 */
function extraDirs(env: NodeJS.ProcessEnv): string[] {
  return ["/usr/local/sbin", "/usr/local/bin", ...(env.HOME ? [join(env.HOME, ".local", "bin")] : []), "/usr/sbin", "/usr/bin", "/sbin", "/bin"];
}

function isExecutable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/** An executable's path: `override` (an env setting such as LOCALE2B_QEMU) when given, else the first on PATH or in the folders above. */
export function findExecutable(name: string, override?: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (override) return isExecutable(override) ? override : undefined;
  for (const dir of [...(env.PATH ?? "").split(delimiter), ...extraDirs(env)]) {
    if (dir && isExecutable(join(dir, name))) return join(dir, name);
  }
  return undefined;
}
