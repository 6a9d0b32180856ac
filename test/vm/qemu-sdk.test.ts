// A real microVM: QEMU -M microvm (KVM where the host has it, TCG here)
// booting the guest kernel and the `base` template's image, envd behind the
// guest init's vsock bridge, reached through vhost-device-vsock's hybrid-vsock
// socket. The same E2B SDK suite as the process runtime
// (test/helpers/sdk-envd-suite.ts) runs against it, then what only a VM
// shows: in-memory pause/resume with a stream held open, the serial console
// in the logs, and QEMU killed under an open stream.
import { existsSync } from "node:fs";
import http from "node:http";
import { Sandbox } from "e2b";
import { describe, expect, it } from "vitest";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import type { PersistedQemuInstance } from "../../control-plane/runtimes/qemu/instance.js";
import { dialHybridVsock } from "../../control-plane/transport/hybrid-vsock.js";
import { startTestControlPlane } from "../helpers/control-plane.js";
import { defineEnvdSuite, suite } from "../helpers/sdk-envd-suite.js";
import { rejection, waitFor } from "../helpers/sdk.js";
import { qemuMissing, testImagesDir } from "../helpers/vm.js";

const missing = qemuMissing();
const why = missing
  ? ` [skipped: ${missing}; it runs where QEMU, qemu-img and vhost-device-vsock are installed (scripts/setup-host) and the kernel and base template are built (npm test builds them when run as root)]`
  : "";

describe.skipIf(missing !== undefined)(`qemu runtime: one microVM${why}`, () => {
  const VM_TIMEOUT = 300_000;
  defineEnvdSuite({
    start: () => startTestControlPlane({ runtime: new QemuRuntime({ imagesDir: testImagesDir() }) }),
    timeoutMs: VM_TIMEOUT,
    sandboxTimeoutMs: 3_600_000,
  });

  const persisted = () => suite.cp!.manager.get(suite.sandbox!.sandboxId).runtimeData as PersistedQemuInstance;

  describe("qemu runtime: what only a VM shows", { timeout: VM_TIMEOUT }, () => {
    it("answers the hybrid-vsock handshake for envd's port and refuses a port nobody listens on", async () => {
      const inst = suite.cp!.manager.list().find((s) => s.id === suite.sandbox!.sandboxId)!;
      expect(inst.runtime).toBe("qemu");
      const socketPath = `${suite.cp!.dataDir}/sandboxes/${inst.id}/vsock.sock`;
      const s = await dialHybridVsock(socketPath, 49983);
      s.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
      // (Read the answer, not to the close: vhost-device-vsock 0.3.0 does not pass a guest-side close on.)
      const reply = await new Promise<string>((resolve, reject) => {
        let text = "";
        s.on("data", (d: Buffer) => {
          text += d.toString();
          if (text.includes("\r\n\r\n")) resolve(text);
        });
        s.on("error", reject);
      });
      s.destroy();
      expect(reply).toMatch(/^HTTP\/1\.1 204/);
      const err = await rejection(dialHybridVsock(socketPath, 1234, 20_000));
      expect(err.message).toMatch(/1234|closed|refused/);
    });

    it("has a tap of its own behind the host's rules: the host's loopback services and the control plane are out of reach", async () => {
      const sbx = suite.sandbox!;
      const port = new URL(suite.cp!.url).port;
      const route = await sbx.commands.run("ip route show default");
      const gw = /default via (\S+)/.exec(route.stdout)?.[1];
      expect(gw, route.stdout).toMatch(/^10\.201\./);
      for (const target of [`${gw}:${port}`, `10.0.2.2:${port}`, `127.0.0.1:${port}`]) {
        const r = await sbx.commands.run(`curl -s -m 5 -o /dev/null http://${target}/health || echo "refused $?"`, { timeoutMs: 60_000 });
        expect(r.stdout, target).toMatch(/^refused/);
      }
    });

    it("serves the guest's serial console (kernel and init) through the logs endpoint", async () => {
      const cp = suite.cp!;
      const res = await fetch(`${cp.url}/sandboxes/${suite.sandbox!.sandboxId}/logs`, { headers: { "X-API-Key": cp.apiKey } });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { logs: { line: string }[] };
      const text = body.logs.map((l) => l.line).join("\n");
      expect(text).toMatch(/locale2b-init/);
    });

    it("pauses in memory and resumes: processes, files and an open output stream survive", async () => {
      const sandbox = suite.sandbox!;
      await sandbox.files.write("/home/user/kept.txt", "kept across pause");
      const out: string[] = [];
      const ticker = await sandbox.commands.run("i=0; while true; do i=$((i+1)); echo $i; sleep 0.2; done", {
        background: true,
        timeoutMs: 0,
        onStdout: (d) => void out.push(d),
      });
      await waitFor(() => out.join("").split("\n").length > 3, "the ticker's first lines");
      expect(await sandbox.pause()).toBe(true);
      expect((await Sandbox.getInfo(sandbox.sandboxId)).state).toBe("paused");
      const before = out.join("");
      await new Promise((r) => setTimeout(r, 1_500));
      // Stopped: nothing more arrives while paused.
      expect(out.join("")).toBe(before);

      const again = await Sandbox.connect(sandbox.sandboxId);
      expect((await Sandbox.getInfo(sandbox.sandboxId)).state).toBe("running");
      // The stream opened before the pause goes on, with no numbers lost.
      await waitFor(() => out.join("").length > before.length + 8, "ticker output after resume");
      const numbers = out.join("").trim().split("\n").map(Number);
      expect(numbers).toEqual(numbers.map((_, i) => i + 1));
      expect(await again.files.read("/home/user/kept.txt")).toBe("kept across pause");
      expect((await again.commands.list()).some((p) => p.pid === ticker.pid)).toBe(true);
      expect(await again.commands.kill(ticker.pid)).toBe(true);
    });

    it("serves a server the user runs in the VM on <port>-<id>.<domain> (E2B's getHost), refuses a closed port", async () => {
      const sandbox = suite.sandbox!;
      const cp = suite.cp!;
      await sandbox.files.write("/home/user/www/hello.html", "hello from inside the VM");
      const server = await sandbox.commands.run("python3 -m http.server 8080 --bind 127.0.0.1 --directory /home/user/www", { background: true, timeoutMs: 0 });
      const get = (port: number, path: string) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const req = http.get(`${cp.url}${path}`, { headers: { host: `${port}-${sandbox.sandboxId}.localhost` } }, (res) => {
            let body = "";
            res.on("data", (d: Buffer) => (body += d.toString()));
            res.on("end", () => resolve({ status: res.statusCode!, body }));
          });
          req.on("error", reject);
        });
      let last = { status: 0, body: "" };
      await waitFor(async () => (last = await get(8080, "/hello.html")).status === 200, () => `the user's server on port 8080 (last: ${last.status} ${last.body})`);
      expect(last.body).toBe("hello from inside the VM");
      const closed = await get(8081, "/");
      expect(closed.status).toBe(502);
      expect(JSON.parse(closed.body).message).toMatch(/port 8081 in the sandbox: .*refused/i);
      expect(await sandbox.commands.kill(server.pid)).toBe(true);
    });

    // Last: it ends the suite's VM.
    it("QEMU killed under an open stream: the client gets an error, the sandbox is dead", async () => {
      const sandbox = suite.sandbox!;
      const out: string[] = [];
      const h = await sandbox.commands.run("while true; do echo tick; sleep 0.1; done", { background: true, timeoutMs: 0, onStdout: (d) => void out.push(d) });
      await waitFor(() => out.length > 2, "ticks");
      const { qemu, tap } = persisted();
      process.kill(qemu.pid, "SIGKILL");
      // An error, not a hang: a hang would end the test at its own timeout, whatever the machine's load.
      const err = await rejection(h.wait());
      expect(err).toBeInstanceOf(Error);
      await waitFor(async () => (await fetch(`${suite.cp!.url}/sandboxes/${sandbox.sandboxId}`, { headers: { "X-API-Key": suite.cp!.apiKey } })).status === 404, "the dead sandbox to answer 404");
      const rec = (await suite.cp!.store.getSandbox(sandbox.sandboxId))!;
      expect(rec.state).toBe("killed");
      expect(rec.endReason).toMatch(/QEMU|vhost/);
      // Its tap went before the death was reported: a server that stops on the news leaves none behind.
      if (tap) expect(existsSync(`/sys/class/net/${tap.name}`), `tap ${tap.name} released`).toBe(false);
    });
  });
});
