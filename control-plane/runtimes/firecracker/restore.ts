// A new sandbox restored from another microVM's memory snapshot (a fork, or
// E2B's create-from-snapshot): its own directory holding a copy of the
// snapshot's disk and links to its vmstate and memory, laid out exactly as
// a paused sandbox of its own, then resumed. The snapshot names the disk and
// the vsock socket by paths relative to Firecracker's working directory (or
// jail), so the new VM opens its own copies; the load gives it its own tap
// (`network_overrides`) and socket (`vsock_override`). The guest's kernel
// still has its source's hostname and address: `restoredGuest` says what it
// must become, and the control plane applies that through envd.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { addresses } from "../net/addresses.js";
import { releaseDevice } from "../net/nft.js";
import type { GuestIdentity, InstanceSpec } from "../runtime.js";
import { copyRootfs } from "./disk.js";
import { FirecrackerInstance } from "./instance.js";
import { prepareJail } from "./jail.js";
import { checkSocketPath, removeVmFiles, type JailSpec, type VmLayout } from "./layout.js";
import { vmNetwork } from "./network.js";
import { placeFile, SNAPSHOT_DISK, SNAPSHOT_MEMORY, SNAPSHOT_VMSTATE, type SnapshotMeta } from "./snapshots.js";
import { writeStateFile, type PersistedFirecracker, type TapRecord } from "./state.js";
import type { Launch } from "./vmm-process.js";

export interface RestoreRequest {
  spec: InstanceSpec;
  /** The snapshot's directory in the snapshot store. */
  from: string;
  meta: SnapshotMeta;
  layout: VmLayout;
  launch: () => Launch;
  jail?: JailSpec;
  /** Linked into a jail for a later cold boot's sake; a restore boots no kernel. */
  kernel?: string;
  apiTimeoutMs?: number;
}

/** Who the restored guest must become: this sandbox's id as hostname, its tap's /30 on eth0. */
export function guestIdentity(sandboxId: string, tap: TapRecord | undefined): GuestIdentity {
  if (!tap) return { hostname: sandboxId };
  const a = addresses(tap.index);
  return { hostname: sandboxId, ipv4: { device: "eth0", address: `${a.guest}/${a.prefix}`, gateway: a.host } };
}

export async function restoreVm(r: RestoreRequest): Promise<FirecrackerInstance> {
  const { spec, layout, meta } = r;
  const { sandboxId, log } = spec;
  checkSocketPath(layout.host("apiSock"));
  checkSocketPath(layout.host("vsock"));
  if (!meta.network && (spec.allowInternetAccess || spec.egress)) {
    log.warn("the snapshot's VM has no network device: the restored sandbox has no network either");
  }
  let tap: TapRecord | undefined;
  let inst: FirecrackerInstance | undefined;
  try {
    mkdirSync(layout.root, { recursive: true });
    mkdirSync(layout.host("snapshotDir"), { recursive: true });
    await copyRootfs(join(r.from, SNAPSHOT_DISK), layout.host("rootfs"), log);
    placeFile(join(r.from, SNAPSHOT_VMSTATE), layout.host("vmstate"));
    placeFile(join(r.from, SNAPSHOT_MEMORY), layout.host("memory"));
    if (r.jail) prepareJail(layout, r.jail, r.kernel);
    // The VM has eth0: it needs a tap, denied everything when the new sandbox asked for no internet.
    if (meta.network) tap = await vmNetwork(spec, r.jail?.uid, spec.allowInternetAccess);
    const record: PersistedFirecracker = {
      v: 1,
      sandboxId,
      pid: 0,
      startTime: 0,
      apiSock: layout.host("apiSock"),
      vsock: layout.host("vsock"),
      rootfs: layout.host("rootfs"),
      snapshot: { vmstate: layout.host("vmstate"), memory: layout.host("memory") },
      paused: true,
      cpuCount: meta.cpuCount,
      memoryMB: meta.memoryMB,
      bootedAt: Date.now(),
      tap,
      jail: r.jail,
      updatedAt: Date.now(),
    };
    writeStateFile(layout.stateFile, record);
    inst = new FirecrackerInstance({ record, layout, launch: r.launch, apiTimeoutMs: r.apiTimeoutMs, log, restoredGuest: guestIdentity(sandboxId, tap) });
    await inst.resume();
    log.debug({ network: !!tap, jailed: !!r.jail }, "microVM restored from a memory snapshot");
    return inst;
  } catch (err) {
    // Leave nothing behind: no process, no tap, no copies.
    if (inst) await inst.kill().catch(() => undefined);
    else if (tap) await releaseDevice(tap.name, sandboxId);
    removeVmFiles(layout);
    throw err;
  }
}
