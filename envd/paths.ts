import { Code, ConnectError } from "@connectrpc/connect";
import { isAbsolute, join, normalize } from "node:path";
import type { User } from "./users.js";

/**
 * Resolves a path the way envd does for cwd, RPC paths and /files:
 * `~` and `~/x` expand to the user's home, relative paths are joined to the
 * home directory (not the workdir), an empty path means the default workdir
 * or, without one, the home directory. `~otheruser` is refused, and so is a
 * NUL byte, which no path can hold (the system calls would cut the path there).
 */
export function resolvePath(input: string, user: User, defaultWorkdir?: string): string {
  if (input.includes("\0")) {
    throw new ConnectError(`path ${JSON.stringify(input)} contains a NUL byte, which no file name can hold: remove it`, Code.InvalidArgument);
  }
  if (input === "") return normalize(defaultWorkdir || user.home);
  if (input === "~") return normalize(user.home);
  if (input.startsWith("~/")) return normalize(join(user.home, input.slice(2)));
  if (input.startsWith("~")) {
    throw new ConnectError(`path '${input}' is invalid: only '~' of the current user can be expanded`, Code.InvalidArgument);
  }
  if (isAbsolute(input)) return normalize(input);
  return normalize(join(user.home, input));
}
