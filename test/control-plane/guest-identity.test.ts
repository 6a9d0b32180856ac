// What the control plane does inside a guest restored from another
// sandbox's memory (a Firecracker fork): rename it and move its eth0 to its
// own /30, as root through envd. Here: what reaches the script, and that a
// sandbox whose root is not the guest's kernel's root cannot do it. The
// script in a real guest: test/vm/qemu-snapshots.test.ts.
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { applyGuestIdentity, identityArgs } from "../../control-plane/runtimes/guest-identity.js";
import { EnvdRpc } from "../../control-plane/transport/envd-rpc.js";
import { create, isRoot, useProcessRuntime } from "../helpers/process-runtime.js";

useProcessRuntime(import.meta.url);

describe("guest identity after a memory restore", () => {
  it("only well-formed names and addresses reach the script", () => {
    expect(identityArgs({ hostname: "f0123abc" })).toEqual(["f0123abc", "", "", ""]);
    expect(identityArgs({ hostname: "a1", ipv4: { device: "eth0", address: "10.201.0.6/30", gateway: "10.201.0.5" } })).toEqual(["a1", "eth0", "10.201.0.6/30", "10.201.0.5"]);
    expect(() => identityArgs({ hostname: "x;reboot" })).toThrow(/invalid guest hostname/);
    expect(() => identityArgs({ hostname: "-x" })).toThrow(/invalid guest hostname/);
    expect(() => identityArgs({ hostname: "ok", ipv4: { device: "eth0 up", address: "10.0.0.2/30", gateway: "10.0.0.1" } })).toThrow(/invalid guest address/);
    expect(() => identityArgs({ hostname: "ok", ipv4: { device: "eth0", address: "$(id)", gateway: "10.0.0.1" } })).toThrow(/invalid guest address/);
  });

  // The script itself runs in a real guest in test/vm/qemu-snapshots.test.ts: a process-runtime
  // sandbox's root has neither CAP_SYS_ADMIN nor CAP_NET_ADMIN, so there it must fail, and say why.
  it.skipIf(!isRoot)(`in a process-runtime sandbox root cannot rename it: a clear error, the host untouched${isRoot ? "" : " [skipped: needs root]"}`, async () => {
    const s = await create({ allowInternetAccess: true });
    const hostBefore = hostname();
    const rpc = new EnvdRpc();
    const target = { endpoint: s.endpoint, token: s.token };
    const log = pino({ level: "silent" });
    await expect(applyGuestIdentity(rpc, target, { hostname: "renamed0fork1" }, log)).rejects.toThrow(/the hostname cannot be set/);
    expect(await s.sh("hostname")).toBe(s.id);
    expect(hostname()).toBe(hostBefore);
    expect(readFileSync("/proc/sys/kernel/hostname", "utf8").trim()).toBe(hostBefore);
  });
});
