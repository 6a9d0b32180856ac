import { Code, ConnectError } from "@connectrpc/connect";
import { mkdirSync, readlinkSync } from "node:fs";
import type { Logger } from "pino";
import type { EnvdRpc, EnvdTarget } from "../transport/envd-rpc.js";
import { runScript } from "../transport/envd-script.js";

/** Every sandbox's working directory for the workspace API, owned by the sandbox's user. */
export const WORKSPACE_DIR = "/workspace";

/**
 * Made inside the sandbox, as root, through envd's process API:
 * - where the sandbox's root filesystem is its own (a VM, a template root),
 *   `mkdir /workspace` and give it to the user;
 * - where the sandbox runs on the host's filesystem, read-only (the process
 *   runtime's default), its own directory (its host path, which such a
 *   sandbox sees at the same path) gets a `workspace/` folder, bound at
 *   /workspace in the sandbox's private mount namespace: private to the
 *   sandbox, gone with it. That needs an empty /workspace on the host to
 *   mount on (exit 3 asks for it). A sandbox in the host's own mount
 *   namespace (no isolation) is never mounted on (exit 6).
 */
const SCRIPT = `
src="$1"; owner="$2"; hostns="$3"
if [ -n "$src" ] && [ -d "$src" ]; then
  [ "$(readlink /proc/self/ns/mnt)" = "$hostns" ] && exit 6
  mkdir -p "$src/workspace" && chown "$owner:" "$src/workspace" && chmod 0755 "$src/workspace" || exit 5
  [ -d ${WORKSPACE_DIR} ] || exit 3
  grep -q " ${WORKSPACE_DIR} " /proc/self/mountinfo && exit 0
  mount --bind "$src/workspace" ${WORKSPACE_DIR} || exit 4
  exit 0
fi
mkdir -p ${WORKSPACE_DIR} && chown "$owner:" ${WORKSPACE_DIR}
`;

const REASONS: Record<number, string> = {
  3: `there is no ${WORKSPACE_DIR} on the host to mount the sandbox's own on (the control plane could not make one)`,
  4: `mounting the sandbox's own directory at ${WORKSPACE_DIR} failed`,
  5: "making the sandbox's own workspace directory failed",
  6: "the sandbox shares the host's mount namespace (no isolation): it gets no private /workspace",
};

/** Makes /workspace in a new sandbox (see SCRIPT). Never throws: a sandbox without it still works, and the reason is logged. */
export async function prepareWorkspaceDir(rpc: EnvdRpc, target: EnvdTarget, sandboxDir: string, owner: string, log: Logger): Promise<void> {
  const hostNs = (() => {
    try {
      return readlinkSync("/proc/self/ns/mnt");
    } catch {
      return "";
    }
  })();
  const args = [sandboxDir, owner, hostNs];
  try {
    let r = await runScript(rpc, target, "root", "workspace", SCRIPT, args).catch(async (err: unknown) => {
      // envd that is not root (user namespaces) cannot act as root: make it as the user, where the root filesystem allows.
      if (ConnectError.from(err).code !== Code.PermissionDenied && ConnectError.from(err).code !== Code.Unauthenticated) throw err;
      return runScript(rpc, target, owner, "workspace", SCRIPT, ["", owner, hostNs]);
    });
    if (r.code === 3 && process.getuid?.() === 0) {
      try {
        mkdirSync(WORKSPACE_DIR, { mode: 0o755 });
        log.info(`made an empty ${WORKSPACE_DIR} on the host: sandboxes on the host's filesystem mount their own workspace there`);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      }
      r = await runScript(rpc, target, "root", "workspace", SCRIPT, args);
    }
    if (r.code !== 0) {
      log.warn({ sandboxId: target.endpoint.sandboxId, code: r.code, stderr: r.stderr }, `no ${WORKSPACE_DIR} in this sandbox: ${REASONS[r.code] ?? "making it failed"}`);
    }
  } catch (err) {
    log.warn({ sandboxId: target.endpoint.sandboxId, err: (err as Error).message }, `no ${WORKSPACE_DIR} in this sandbox`);
  }
}
