// Credentials reach skopeo in a file (--src-authfile), never in its argv,
// where `ps` and /proc/<pid>/cmdline would show them to every user: mode
// 0600, in the pull's private work folder, removed with it.
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Credentials } from "./auth.js";

/** Writes containers-auth.json(5) for `host` into `dir` (mode 0700, the pull's own); returns its path. */
export async function writeAuthFile(dir: string, host: string, creds: Credentials | undefined): Promise<string> {
  const file = join(dir, "auth.json");
  const auths = creds ? { [host]: { auth: Buffer.from(`${creds.username}:${creds.password}`).toString("base64") } } : {};
  await writeFile(file, JSON.stringify({ auths }), { mode: 0o600, flag: "wx" });
  return file;
}
