// The test cluster's network on the host: a bridge (the host's end, where the control plane listens), one
// network namespace per node joined to it by a veth, routes between the nodes' pod ranges, and FORWARD
// accepts for the bridge (hosts running Docker set the FORWARD policy to DROP). See layout.ts for addresses.
import { existsSync, readdirSync } from "node:fs";
import type { ClusterLayout } from "./layout.js";
import { run } from "./host.js";

const ip = (args: string[]) => run("ip", args);

function forwardRules(l: ClusterLayout): string[][] {
  const c = ["-m", "comment", "--comment", l.iptablesComment, "-j", "ACCEPT"];
  return [
    ["FORWARD", "-i", l.bridge, ...c],
    ["FORWARD", "-o", l.bridge, ...c],
  ];
}

export async function setupNetwork(l: ClusterLayout): Promise<void> {
  await ip(["link", "add", l.bridge, "type", "bridge"]);
  await ip(["addr", "add", `${l.hostIP}/24`, "dev", l.bridge]);
  await ip(["link", "set", l.bridge, "up"]);
  for (const rule of forwardRules(l)) await run("iptables", ["-w", "-I", ...rule]);
  for (const n of l.nodes) {
    await ip(["netns", "add", n.netns]);
    await ip(["link", "add", n.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", n.netns]);
    await ip(["link", "set", n.hostVeth, "master", l.bridge, "up"]);
    await ip(["-n", n.netns, "link", "set", "lo", "up"]);
    await ip(["-n", n.netns, "addr", "add", `${n.ip}/24`, "dev", "eth0"]);
    await ip(["-n", n.netns, "link", "set", "eth0", "up"]);
    await ip(["-n", n.netns, "route", "add", "default", "via", l.hostIP]);
    for (const other of l.nodes) if (other !== n) await ip(["-n", n.netns, "route", "add", other.podCIDR, "via", other.ip]);
    // The node forwards between its pods' bridge and eth0 (a new namespace starts with forwarding off).
    await run("nsenter", [`--net=${n.netnsPath}`, "--", "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);
    // The host reaches every pod directly (tests talk to pod IPs from here).
    await ip(["route", "add", n.podCIDR, "via", n.ip]);
  }
}

/** Removes what setupNetwork made; each step tolerates its object being gone already. */
export async function teardownNetwork(l: ClusterLayout): Promise<void> {
  for (const n of l.nodes) {
    await run("ip", ["route", "del", n.podCIDR], { allowFail: true });
    if (existsSync(n.netnsPath)) await run("ip", ["netns", "del", n.netns], { allowFail: true });
    await run("ip", ["link", "del", n.hostVeth], { allowFail: true });
  }
  await run("ip", ["link", "del", l.bridge], { allowFail: true });
  for (const rule of forwardRules(l)) {
    for (let k = 0; k < 10; k++) if ((await run("iptables", ["-w", "-D", ...rule], { allowFail: true })).code !== 0) break;
  }
}

/** What of the cluster's network is still on the host (for `status` and the tests' leak checks). */
export async function networkLeftovers(l: ClusterLayout): Promise<string[]> {
  const left: string[] = [];
  const links = existsSync("/sys/class/net") ? readdirSync("/sys/class/net") : [];
  for (const dev of [l.bridge, ...l.nodes.map((n) => n.hostVeth)]) if (links.includes(dev)) left.push(`network device ${dev}`);
  for (const n of l.nodes) if (existsSync(n.netnsPath)) left.push(`network namespace ${n.netns}`);
  const routes = (await run("ip", ["-4", "route"], { allowFail: true })).stdout;
  for (const n of l.nodes) if (routes.includes(n.podCIDR)) left.push(`route ${n.podCIDR}`);
  const rules = (await run("iptables-save", [], { allowFail: true })).stdout;
  for (const line of rules.split("\n")) if (line.split(" ").includes(l.iptablesComment)) left.push(`iptables ${line.trim()}`);
  return left;
}
