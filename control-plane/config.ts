// Settings shared by the CLI commands (serve, keys, sandbox).
import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { setting } from "./settings.js";

export const DEFAULT_PORT = 3000;
export const DEFAULT_HOST = "127.0.0.1";
export const DEFAULT_URL = `http://${DEFAULT_HOST}:${DEFAULT_PORT}`;
export const DB_FILE = "locale2b.db";

/**
 * Where state lives when neither --data-dir nor LOCALE2B_DATA_DIR says:
 * `/var/lib/locale2b` for root, else `$XDG_STATE_HOME/locale2b`, else
 * `~/.local/state/locale2b`.
 */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env, uid = process.getuid?.()): string {
  if (uid === 0) return "/var/lib/locale2b";
  const xdg = env.XDG_STATE_HOME;
  // The XDG spec says relative paths are invalid and must be ignored.
  if (xdg && isAbsolute(xdg)) return join(xdg, "locale2b");
  return join(env.HOME || homedir(), ".local", "state", "locale2b");
}

/** --data-dir, then LOCALE2B_DATA_DIR, then the default; always absolute. */
export function resolveDataDir(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return resolve(flag || setting("LOCALE2B_DATA_DIR", env) || defaultDataDir(env));
}

export function dbPath(dataDir: string): string {
  return join(dataDir, DB_FILE);
}

/** The API key a client command uses: --api-key, then E2B_API_KEY, then LOCALE2B_API_KEY. */
export function clientApiKey(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  return flag || env.E2B_API_KEY || setting("LOCALE2B_API_KEY", env) || undefined;
}

/** The server a client command talks to: --url, then LOCALE2B_URL, then http://127.0.0.1:3000. */
export function clientUrl(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return (flag || setting("LOCALE2B_URL", env) || DEFAULT_URL).replace(/\/+$/, "");
}
