import type { Client } from "@connectrpc/connect";
import http from "node:http";
import type { Process } from "../../gen/ts/process/process_pb.js";
import { GUEST } from "../../control-plane/images/layout.js";
import { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { routedProcessClient } from "./clients.js";
import { ENVD_PORT, type ControlPlaneChild, type SandboxHandle } from "./control-plane.js";
import { processTable, sandboxPids } from "./procmem.js";

/** Helpers shared by several parts of `npm run bench -- sandboxes` (bench/sandboxes/). */

export const MiB = 1024 * 1024;

/**
 * The sandbox's envd (host pid): the node process of its tree running the image's envd bundle (sandbox
 * mode), or `… envd --listen …` (user-namespace mode, where unshare and the namespace's init shell carry
 * the same words in their arguments, but are not node).
 */
export function envdPid(sb: SandboxHandle): number {
  const table = processTable();
  const { pids } = sandboxPids(sb.id, sb.dir, table);
  for (const p of pids) {
    const cmd = table.get(p)?.cmdline ?? "";
    if (cmd.startsWith(`${process.execPath} `) && cmd.includes(" envd --listen ")) return p;
    if (cmd.startsWith(`${GUEST.node} `) && cmd.includes(` ${GUEST.envd} `)) return p;
  }
  throw new Error(`cannot find envd's process of sandbox ${sb.id}`);
}

/** One Start of /bin/true, consumed until the stream ends; checks the end event. */
export async function startTrue(client: Client<typeof Process>): Promise<void> {
  let exitCode: number | undefined;
  for await (const res of client.start({ process: { cmd: "/bin/true", args: [] }, stdin: false })) {
    const e = res.event?.event;
    if (e?.case === "end") exitCode = e.value.exitCode;
  }
  if (exitCode !== 0) throw new Error(`Start /bin/true: no end event with exit code 0 (got ${exitCode})`);
}

/** A shared keep-alive pool for the clients that go through the control plane. */
export const proxyAgent = new http.Agent({ keepAlive: true, maxSockets: 256 });

export function proxyClient(cp: ControlPlaneChild, sb: SandboxHandle, binary = false): Client<typeof Process> {
  return routedProcessClient({ baseUrl: cp.url, binary, agent: proxyAgent, headers: sb.proxyHeaders });
}

export function directClient(sb: SandboxHandle, binary = false): { client: Client<typeof Process>; agent: HybridVsockAgent } {
  const agent = new HybridVsockAgent(sb.socketPath, ENVD_PORT);
  const client = routedProcessClient({ baseUrl: `http://${ENVD_PORT}-${sb.id}`, binary, agent, headers: { "X-Access-Token": sb.token } });
  return { client, agent };
}
