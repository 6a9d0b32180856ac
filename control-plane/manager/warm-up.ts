import type { Logger } from "pino";
import { Process } from "../../gen/ts/process/process_pb.js";
import { internalTag } from "../events/envd-activity.js";
import type { EnvdRpc, EnvdTarget } from "../transport/envd-rpc.js";

/**
 * A warm sandbox's envd runs one command the way an E2B SDK's first command
 * comes (`bash -l -c true`, Connect JSON, as the default user, over the
 * proxy's pooled connection) before any create claims it. V8 compiles
 * lazily, and the sandbox's own overlay mount starts with no cached
 * lookups: without this, that first command pays for compiling envd's JSON
 * and spawn paths and for bash finding its files (on this project's 2-core
 * hosts, first output came about 40 % later than on a sandbox that had run
 * one command). Tagged internal: no event, no audit entry. Never throws: a
 * sandbox that was not warmed up still works.
 */
export async function warmUpEnvd(rpc: EnvdRpc, target: EnvdTarget, log: Logger): Promise<void> {
  try {
    const client = rpc.client(Process, target, undefined, true);
    for await (const _ of client.start({ process: { cmd: "/bin/bash", args: ["-l", "-c", "true"] }, tag: internalTag(target.endpoint.sandboxId, "warm-up"), stdin: false }, { timeoutMs: 15_000 })) {
      // drain: start, end
    }
  } catch (err) {
    log.warn({ err, sandboxId: target.endpoint.sandboxId }, "warming up a warm sandbox's envd failed (its first command will be slower)");
  }
}
