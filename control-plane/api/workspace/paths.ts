import { posix } from "node:path";
import { WORKSPACE_DIR } from "../../workspace/workspace-dir.js";
import { WsError } from "./errors.js";

const MAX_PATH = 4096;

/**
 * A path in the sandbox as the workspace API takes it: absolute, or
 * relative to /workspace (and then it may not climb out of it with `..`);
 * normalised; never empty, never with a NUL byte, never longer than 4096.
 */
export function sandboxPath(input: unknown, field = "path"): string {
  if (input === undefined || input === null || input === "") throw new WsError(400, "invalid_request", `'${field}' is required: an absolute path in the sandbox, or one relative to ${WORKSPACE_DIR}`);
  if (typeof input !== "string") throw new WsError(400, "invalid_request", `'${field}' must be a string`);
  if (input.includes("\0")) throw new WsError(400, "invalid_path", `invalid ${field}: it contains a NUL byte`);
  if (input.length > MAX_PATH) throw new WsError(400, "invalid_path", `invalid ${field}: longer than ${MAX_PATH} characters`);
  if (input.startsWith("~")) throw new WsError(400, "invalid_path", `invalid ${field} '${input}': '~' is not expanded here; give an absolute path or one relative to ${WORKSPACE_DIR}`);
  if (posix.isAbsolute(input)) return posix.normalize(input);
  const rel = posix.normalize(input);
  if (rel === ".." || rel.startsWith("../")) {
    throw new WsError(400, "invalid_path", `invalid ${field} '${input}': a relative path may not leave ${WORKSPACE_DIR}; give an absolute path instead`);
  }
  return posix.join(WORKSPACE_DIR, rel);
}
