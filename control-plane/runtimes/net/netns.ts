// Named network namespaces (`ip netns add`, a bind mount under /run/netns):
// a sandbox's network that exists before anything runs in it, e.g. the one
// runsc starts a gVisor sandbox in (`--network=sandbox`), and that outlives a
// control-plane restart without a process holding it.
import { existsSync } from "node:fs";
import { ip } from "./addresses.js";

/** `l2bn` + the last 12 characters of the sandbox id (as the device names). */
export function netnsName(sandboxId: string): string {
  return `l2bn${sandboxId.slice(-12)}`;
}

export function netnsExists(name: string): boolean {
  return existsSync(`/run/netns/${name}`);
}

/** Creates the namespace with `lo` up; an old one of the same name (a leftover) is replaced. */
export async function createNetns(name: string): Promise<void> {
  if (netnsExists(name)) await deleteNetns(name);
  await ip(["netns", "add", name]);
  try {
    await ip(["-n", name, "link", "set", "lo", "up"]);
  } catch (err) {
    await deleteNetns(name);
    throw err;
  }
}

/** Removes the namespace (its devices go with its last user); what is already gone is fine. */
export async function deleteNetns(name: string): Promise<void> {
  if (!netnsExists(name)) return;
  await ip(["netns", "delete", name]).catch(() => undefined);
}
