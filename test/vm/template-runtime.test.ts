// A template may name the runtime its sandboxes run on (`runtime: qemu` in its
// definition); the server's --runtime is only the default. Other runtimes start
// on first use, and one this host cannot run fails that template's creates with
// its reason, not the server.
import { describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import { createRuntime } from "../../control-plane/runtimes/registry.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { qemuMissing, testImagesDir } from "../helpers/vm.js";

async function createVia(cp: TestControlPlane, templateID: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${cp.url}/sandboxes`, {
    method: "POST",
    headers: { "X-API-Key": cp.apiKey, "content-type": "application/json" },
    body: JSON.stringify({ templateID }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe("per-template runtime", () => {
  it("a template asking for a runtime this host cannot run fails its creates with the reason; others still work", async () => {
    const cp = await startTestControlPlane({
      runtime: new ProcessRuntime(),
      createRuntime: (name) => createRuntime(name, { imagesDir: testImagesDir() }),
      templateRuntime: (id) => (id === "base" ? "firecracker" : undefined),
    });
    try {
      const host = process.env.LOCALE2B_FIRECRACKER ? "a firecracker binary is configured" : "";
      const r = await createVia(cp, "base");
      if (!host) {
        expect(r.status).toBeGreaterThanOrEqual(500);
        // Either the runtime refuses to start or its create says what is missing.
        expect(String(r.body.message)).toMatch(/firecracker.*(not found|KVM)|cannot start: .*firecracker/i);
      }
      expect(cp.manager.list()).toEqual([]);
    } finally {
      await cp.close();
    }
  });

  const missing = qemuMissing();
  it.skipIf(missing !== undefined)(
    `a process-runtime server runs a qemu template in a microVM${missing ? ` [skipped: ${missing}; runs where the qemu suite runs]` : ""}`,
    { timeout: 300_000 },
    async () => {
      const cp = await startTestControlPlane({
        runtime: new ProcessRuntime(),
        createRuntime: async (name) => {
          if (name !== "qemu") throw new Error(`unexpected runtime ${name}`);
          return new QemuRuntime({ imagesDir: testImagesDir() });
        },
        templateRuntime: (id) => (id === "base" ? "qemu" : undefined),
        imagesDir: testImagesDir(),
      });
      try {
        const r = await createVia(cp, "base");
        expect(r.status, JSON.stringify(r.body)).toBe(201);
        const id = String(r.body.sandboxID);
        expect((await cp.store.getSandbox(id))!.runtime).toBe("qemu");
        expect(cp.manager.runtimeName).toBe("process");
        const metrics = await (await fetch(`${cp.url}/metrics`)).text();
        expect(metrics).toMatch(new RegExp(`locale2b_sandbox_host_memory_bytes\\{sandbox_id="${id}",runtime="qemu"\\} \\d+`));
        await cp.manager.kill(id);
      } finally {
        await cp.close();
      }
    },
  );
});
