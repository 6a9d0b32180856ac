import { Process } from "../../gen/ts/process/process_pb.js";
import { internalTag } from "../events/envd-activity.js";
import type { EnvdRpc, EnvdTarget } from "./envd-rpc.js";

/**
 * Runs `/bin/sh -c script <name> args…` in a sandbox as `user` through
 * envd's process API (the control plane's own chores: tagged as internal,
 * so activity tracking ignores them); its exit code and the start of its stderr.
 */
export async function runScript(
  rpc: EnvdRpc,
  target: EnvdTarget,
  user: string,
  what: string,
  script: string,
  args: string[],
): Promise<{ code: number; stderr: string }> {
  const client = rpc.client(Process, target, user);
  let code = -1;
  let stderr = "";
  for await (const res of client.start(
    { process: { cmd: "/bin/sh", args: ["-c", script, `locale2b-${what}`, ...args] }, tag: internalTag(target.endpoint.sandboxId, what), stdin: false },
    { timeoutMs: 15_000 },
  )) {
    const e = res.event?.event;
    if (e?.case === "data" && e.value.output.case === "stderr") stderr += new TextDecoder().decode(e.value.output.value);
    if (e?.case === "end") code = e.value.exitCode;
  }
  return { code, stderr: stderr.trim().slice(0, 500) };
}
