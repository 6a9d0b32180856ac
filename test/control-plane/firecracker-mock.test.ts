// The pieces under the firecracker runtime's tests, with no runtime: the
// spec validator the MOCK Firecracker (test/helpers/mock-firecracker.ts)
// checks every request with, the mock's own state machine (so the sequences
// firecracker-api.test.ts asserts mean something), and the jailer's command
// line and paths.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FirecrackerApi } from "../../control-plane/runtimes/firecracker/api-client.js";
import { bootArgs } from "../../control-plane/runtimes/firecracker/firecracker-runtime.js";
import { vmLayout } from "../../control-plane/runtimes/firecracker/layout.js";
import { jailerLaunch } from "../../control-plane/runtimes/firecracker/vmm-process.js";
import { waitFor } from "../../control-plane/runtimes/process/procfs.js";
import { fakeImages, newId } from "../helpers/firecracker-fixture.js";
import { mockFirecrackerBin } from "../helpers/firecracker-mock-bin.js";
import { FirecrackerSpec, findFirecrackerSpec } from "../helpers/firecracker-spec.js";

const SPEC_PATH = findFirecrackerSpec();
const haveSpec = existsSync(SPEC_PATH);

describe.skipIf(!haveSpec)(`the mock Firecracker and the runtime's plumbing${haveSpec ? "" : ` (skipped: ${SPEC_PATH} not found)`}`, () => {
  let root: string;
  let images: ReturnType<typeof fakeImages>;
  let spec: FirecrackerSpec;

  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), "l2b-fcm-"));
    images = fakeImages(root);
    spec = new FirecrackerSpec(SPEC_PATH);
  });
  afterAll(() => {
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it("the spec validator rejects what Firecracker rejects", () => {
    expect(spec.validate("PUT", "/machine-config", { vcpu_count: 2, mem_size_mib: 256, smt: false }).ok).toBe(true);
    const bad: [string, string, unknown, RegExp][] = [
      ["PUT", "/machine-config", { vcpu_count: 0, mem_size_mib: 256 }, /vcpu_count must be >= 1/],
      ["PUT", "/machine-config", { vcpus: 2, mem_size_mib: 256, vcpu_count: 1 }, /additional properties/],
      ["PUT", "/boot-source", { boot_args: "x" }, /kernel_image_path/],
      ["PUT", "/drives/rootfs", { drive_id: "other", path_on_host: "/x", is_root_device: true, is_read_only: false }, /does not match/],
      ["PUT", "/snapshot/load", { snapshot_path: "/s", mem_file_path: "/m", mem_backend: { backend_type: "File", backend_path: "/m" } }, /exactly one/],
      ["PUT", "/snapshot/load", { snapshot_path: "/s" }, /exactly one/],
      ["PUT", "/snapshot/create", { snapshot_type: "Full", snapshot_path: "/s" }, /mem_file_path/],
      ["PATCH", "/vm", { state: "Stopped" }, /allowed values/],
      ["PUT", "/actions", { action_type: "Reboot" }, /allowed values/],
      ["DELETE", "/vm", undefined, /Invalid request method/],
      ["PUT", "/no-such-thing", {}, /Invalid request method and\/or path/],
    ];
    for (const [method, path, body, re] of bad) {
      const v = spec.validate(method, path, body);
      expect(v.ok, `${method} ${path} ${JSON.stringify(body)}`).toBe(false);
      if (!v.ok) expect(v.error).toMatch(re);
    }
    const old = spec.validate("PUT", "/snapshot/load", { snapshot_path: "/s", mem_file_path: "/m" });
    expect(old.ok && old.deprecated).toEqual(["SnapshotLoadParams.mem_file_path"]);
  });


  it("the mock enforces Firecracker's state machine (so the runtime's sequences mean something)", async () => {
    const id = newId();
    const sock = join(root, `${id}.sock`);
    const child = spawn(mockFirecrackerBin(), ["--api-sock", sock, "--id", id], { stdio: "ignore" });
    try {
      const api = new FirecrackerApi(sock, { timeoutMs: 2_000 });
      let info: Awaited<ReturnType<FirecrackerApi["describeInstance"]>> | undefined;
      for (let i = 0; i < 500 && !info; i++) {
        info = await api.describeInstance().catch(async () => {
          await new Promise((r) => setTimeout(r, 10));
          return undefined;
        });
      }
      expect(info).toMatchObject({ id, state: "Not started" });
      await expect(api.pauseVm()).rejects.toThrow(/PATCH \/vm failed \(HTTP 400\): .*not supported before starting/);
      await expect(api.instanceStart()).rejects.toThrow(/without kernel configuration/);
      await expect(api.call("PUT", "/machine-config", { vcpus: 1 })).rejects.toThrow(/PUT \/machine-config failed \(HTTP 400\): .*vcpu_count/);
      await api.putMachineConfig({ vcpu_count: 1, mem_size_mib: 128 });
      await expect(
        api.loadSnapshot({ snapshot_path: "/x", mem_backend: { backend_type: "File", backend_path: "/y" }, resume_vm: true }),
      ).rejects.toThrow(/not allowed after configuring boot-specific resources/);
      await api.putBootSource({ kernel_image_path: images.kernel });
      await api.instanceStart();
      await expect(api.putMachineConfig({ vcpu_count: 2, mem_size_mib: 128 })).rejects.toThrow(/not supported after starting the microVM/);
      await expect(api.createSnapshot({ snapshot_type: "Full", snapshot_path: join(root, "s"), mem_file_path: join(root, "m") })).rejects.toThrow(/must be paused/);
      expect(await api.describeInstance()).toMatchObject({ state: "Running" });
    } finally {
      child.kill("SIGKILL");
      await waitFor(() => child.exitCode !== null || child.signalCode !== null, 2_000);
    }
  });


  it("jailer: the command line and the paths Firecracker sees inside the chroot", () => {
    const jail = { chrootBase: "/srv/jailer", execFile: "/usr/local/bin/firecracker", uid: 123, gid: 100 };
    const layout = vmLayout("/var/lib/locale2b/sandboxes/abc", "abc", jail);
    expect(layout.vm("apiSock")).toBe("/fc.sock");
    expect(layout.host("vsock")).toBe("/srv/jailer/firecracker/abc/root/vsock.sock");
    expect(layout.jailDir).toBe("/srv/jailer/firecracker/abc");
    expect(layout.console).toBe("/var/lib/locale2b/sandboxes/abc/console.log");
    expect(jailerLaunch("/usr/local/bin/jailer", jail, layout.vm("apiSock"), "abc").args).toEqual([
      "--id", "abc", "--exec-file", "/usr/local/bin/firecracker", "--uid", "123", "--gid", "100",
      "--chroot-base-dir", "/srv/jailer", "--", "--api-sock", "/fc.sock",
    ]);
    expect(bootArgs("abc", 1_700_000_000_000)).toBe(
      "console=ttyS0 reboot=k panic=1 pci=off root=/dev/vda rw init=/sbin/locale2b-init l2b.hostname=abc l2b.epoch=1700000000",
    );
  });

});
