// The egress proxies of this server's sandboxes, by sandbox id: started when
// a sandbox's policy names hosts and denies some addresses (a policy that
// denies nothing has nothing for a name to open), re-pointed when its policy
// changes, stopped when it has none or its device goes. They live in the
// server process: a server restart re-creates them as it adopts its
// sandboxes (applyPolicy), and proxied connections open across it are cut.
import type { Logger } from "pino";
import type { EgressPolicy } from "../../../domain/network.js";
import { runCommand } from "../../../host/commands.js";
import { ipBin } from "../addresses.js";
import { nameServers } from "../dns.js";
import { LISTENER_PORT, redirectToProxy, stopRedirect } from "./redirect-rules.js";
import { SandboxProxy } from "./sandbox-proxy.js";
import { followSource, stopWatchingRedirects, watchRedirects } from "./original-destination.js";

const proxies = new Map<string, { proxy: SandboxProxy; device: string; host: string }>();

/** Whether a policy needs the proxy: host names to allow and something they could be an exception to, or request rules. */
export function needsProxy(policy: EgressPolicy): boolean {
  return ((policy.names?.length ?? 0) > 0 && policy.deny.length > 0) || hasRules(policy);
}

/** Whether the policy has request rules (network.rules): then all its TCP goes through the proxy. */
export function hasRules(policy: EgressPolicy): boolean {
  return Object.keys(policy.rules ?? {}).length > 0;
}

/** The device's host address and the sandbox's (the /30's .1 and .2; read with `ip`: Node lists no device without carrier yet). */
async function ends(device: string): Promise<{ host: string; guest: string }> {
  const { stdout } = await runCommand(ipBin(), ["-o", "-4", "addr", "show", "dev", device]);
  const host = /\binet (\d+\.\d+\.\d+\.\d+)\//.exec(stdout)?.[1];
  if (!host) throw new Error(`the sandbox's network device ${device} has no IPv4 address for its egress proxy`);
  const parts = host.split(".").map(Number);
  parts[3]! += 1;
  return { host, guest: parts.join(".") };
}

/** Starts, updates or stops the sandbox's proxy for `policy`. On failure the sandbox has no proxy and no redirect. */
export async function setProxy(device: string, sandboxId: string, policy: EgressPolicy, log: Logger): Promise<void> {
  if (!needsProxy(policy)) return proxies.has(sandboxId) ? dropProxy(sandboxId, device, false) : undefined;
  let entry = proxies.get(sandboxId);
  if (entry && entry.device !== device) {
    await dropProxy(sandboxId, entry.device);
    entry = undefined;
  }
  if (!entry) {
    const { host, guest } = await ends(device);
    const proxy = new SandboxProxy({ sandboxId, host, guest, policy, log });
    watchRedirects(LISTENER_PORT);
    await proxy.listen(LISTENER_PORT);
    followSource(guest, true);
    entry = { proxy, device, host };
    proxies.set(sandboxId, entry);
  }
  entry.proxy.setPolicy(policy);
  try {
    await redirectToProxy(device, sandboxId, policy, entry.proxy.guest, entry.host, nameServers());
  } catch (err) {
    await dropProxy(sandboxId);
    throw err;
  }
  log.debug({ sandboxId, listener: `${entry.host}:${LISTENER_PORT}`, names: policy.names, ruleHosts: Object.keys(policy.rules ?? {}) }, "egress proxy set");
}

/**
 * The sandbox's proxy goes with its redirect (`device`'s, also when this
 * process has no proxy for it: one a previous server made); none is fine.
 * `cutOpen`: its open connections are reset (the sandbox is gone); otherwise
 * (a new policy without names) they go on until they end.
 */
export async function dropProxy(sandboxId: string, device?: string, cutOpen = true): Promise<void> {
  const entry = proxies.get(sandboxId);
  proxies.delete(sandboxId);
  if (entry) {
    followSource(entry.proxy.guest, false);
    await entry.proxy.close(cutOpen);
  }
  const dev = device ?? entry?.device;
  if (dev) await stopRedirect(dev, sandboxId);
}

/**
 * A server stops: the proxies of its sandboxes (`sandboxIds`) stop with it;
 * their redirects stay until the next server adopts the sandboxes and
 * re-points them. The conntrack events stop with the last proxy.
 */
export async function closeEgressProxies(sandboxIds: string[]): Promise<void> {
  const mine = sandboxIds.flatMap((id) => {
    const e = proxies.get(id);
    proxies.delete(id);
    if (e) followSource(e.proxy.guest, false);
    return e ? [e] : [];
  });
  if (!proxies.size) stopWatchingRedirects();
  await Promise.all(mine.map((e) => e.proxy.close(true)));
}
