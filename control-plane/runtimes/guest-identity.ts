// A guest restored from another sandbox's memory (a Firecracker fork) wakes
// up with its source's hostname and, with a network, its source's address,
// while its tap on the host has a /30 of its own. The control plane renames
// and re-addresses it from inside, as root through envd's process API, right
// after /init and before anyone else can run a command in it.
import type { Logger } from "pino";
import type { EnvdRpc, EnvdTarget } from "../transport/envd-rpc.js";
import { runScript } from "../transport/envd-script.js";
import type { GuestIdentity } from "./runtime.js";

const SCRIPT = `
name="$1"; dev="$2"; addr="$3"; gw="$4"
old="$(cat /proc/sys/kernel/hostname)"
if [ "$old" != "$name" ]; then
  hostname "$name" 2>/dev/null || echo "$name" 2>/dev/null > /proc/sys/kernel/hostname || exit 3
  [ -w /etc/hostname ] && echo "$name" > /etc/hostname
  if [ -w /etc/hosts ] && grep -qw -- "$old" /etc/hosts; then
    hosts="$(sed "s/\\\\b$old\\\\b/$name/g" /etc/hosts)" && printf '%s\\n' "$hosts" > /etc/hosts
  fi
fi
[ -n "$dev" ] || exit 0
command -v ip >/dev/null 2>&1 || exit 4
ip -4 addr flush dev "$dev" scope global || exit 5
ip -4 addr add "$addr" dev "$dev" || exit 5
ip link set "$dev" up || exit 5
ip -4 route replace default via "$gw" dev "$dev" || exit 5
`;

const REASONS: Record<number, string> = {
  3: "the hostname cannot be set (envd is not root in a UTS namespace of its own)",
  4: "the guest has no 'ip' command (install iproute2 in the template)",
  5: "the guest's network interface could not be re-addressed",
};

const HOSTNAME = /^[A-Za-z0-9][A-Za-z0-9-]{0,62}$/;
const CIDR = /^(\d{1,3}\.){3}\d{1,3}\/\d{1,2}$/;
const IPV4 = /^(\d{1,3}\.){3}\d{1,3}$/;
const DEVICE = /^[A-Za-z0-9_.-]{1,15}$/;

/** The script's arguments, every value checked (they come from the control plane, never from a request). */
export function identityArgs(guest: GuestIdentity): string[] {
  if (!HOSTNAME.test(guest.hostname)) throw new Error(`invalid guest hostname '${guest.hostname}'`);
  const v4 = guest.ipv4;
  if (v4 && (!DEVICE.test(v4.device) || !CIDR.test(v4.address) || !IPV4.test(v4.gateway))) {
    throw new Error(`invalid guest address ${JSON.stringify(v4)}`);
  }
  return [guest.hostname, v4?.device ?? "", v4?.address ?? "", v4?.gateway ?? ""];
}

/** Renames (and re-addresses) the guest; throws with the reason when it cannot. */
export async function applyGuestIdentity(rpc: EnvdRpc, target: EnvdTarget, guest: GuestIdentity, log: Logger): Promise<void> {
  const r = await runScript(rpc, target, "root", "identity", SCRIPT, identityArgs(guest));
  if (r.code !== 0) {
    throw new Error(`cannot give the restored guest its own identity: ${REASONS[r.code] ?? `exit ${r.code}`}${r.stderr ? ` (${r.stderr})` : ""}`);
  }
  log.info({ hostname: guest.hostname, ipv4: guest.ipv4?.address }, "restored guest renamed");
}
