// Snapshots outlive the control plane: taken through `locale2b serve`, the
// server SIGKILLed, started again on the same data dir: the snapshot is
// listed, sandboxes start from it, it deletes; a capture cut short (its
// temporary directory) is cleared at start. And a runtime that cannot take
// snapshots (the process runtime without root's sandbox mode) refuses with
// a clear 400, never 404 "no route" or 500.
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { serve, type Served } from "../helpers/cli.js";
import { startTestControlPlane } from "../helpers/control-plane.js";
import { CONTROL_PLANE_SPEC, specAvailable, validatorFor } from "../helpers/openapi.js";
import { setEnv } from "../helpers/sdk.js";

const caps = await new ProcessRuntime().capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;
const dataDir = mkdtempSync(join(tmpdir(), "locale2b-snap-restart-"));
const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
let server: Served | undefined;

afterAll(async () => {
  if (server) {
    const restore = sdkEnv(server.url);
    for (const s of await Sandbox.list().nextItems().catch(() => [])) await Sandbox.kill(s.sandboxId).catch(() => false);
    restore();
    await server.stop();
  }
  rmSync(dataDir, { recursive: true, force: true });
});

function sdkEnv(url: string): () => void {
  return setEnv({ E2B_API_URL: url, E2B_SANDBOX_URL: url, E2B_API_KEY: apiKey, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
}

describe.skipIf(skip !== undefined)(`snapshots across a control-plane restart${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("a snapshot is listed, used and deleted after the server was SIGKILLed; a cut-short capture is cleared", async () => {
    server = await serve(dataDir, [], { LOCALE2B_API_KEY: apiKey });
    let restore = sdkEnv(server.url);
    const src = await Sandbox.create({ timeoutMs: 600_000 });
    await src.files.write("/home/user/persist.txt", "across restarts");
    const name = `persist-${process.pid}`;
    const snap = await Sandbox.createSnapshot(src.sandboxId, { name });
    await Sandbox.kill(src.sandboxId);
    restore();

    server.child.kill("SIGKILL");
    await new Promise((r) => server!.child.once("exit", r));
    // What a capture killed half-way leaves: a temporary directory, and no record.
    const partial = join(dataDir, "snapshots", ".tmp-cutshort");
    mkdirSync(partial);
    writeFileSync(join(partial, "disk.img"), "partial");

    server = await serve(dataDir, [], { LOCALE2B_API_KEY: apiKey });
    restore = sdkEnv(server.url);
    try {
      expect(existsSync(partial)).toBe(false);
      const listed = await Sandbox.listSnapshots({ name }).nextItems();
      expect(listed).toEqual([snap]);
      const child = await Sandbox.create(name, { timeoutMs: 600_000 });
      expect(await child.files.read("/home/user/persist.txt")).toBe("across restarts");
      await child.kill();
      expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
      expect(readdirSync(join(dataDir, "snapshots"))).toEqual([]);
    } finally {
      restore();
    }
  });
});

describe("a runtime that cannot take snapshots refuses with a clear 400", () => {
  it("user-namespace sandboxes (no writable layer of their own): snapshot, fork and a filesystem-only pause are 400, nothing is left", async () => {
    const cp = await startTestControlPlane({ runtime: new ProcessRuntime({ forceMode: "userns" }) });
    const restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    try {
      const sbx = await Sandbox.create({ timeoutMs: 120_000 });
      for (const what of ["snapshots", "fork"]) {
        const res = await fetch(`${cp.url}/sandboxes/${sbx.sandboxId}/${what}`, {
          method: "POST",
          headers: { "x-api-key": cp.apiKey, "content-type": "application/json" },
          body: "{}",
        });
        const body = (await res.json()) as { code: number; message: string };
        expect(res.status, what).toBe(400);
        expect(body.code).toBe(400);
        expect(body.message).toMatch(/cannot take snapshots/);
        if (specAvailable(CONTROL_PLANE_SPEC)) expect(validatorFor(CONTROL_PLANE_SPEC, "#/components/schemas/Error")(body)).toBe(true);
      }
      const err = await Sandbox.createSnapshot(sbx.sandboxId).catch((e: Error) => e);
      expect((err as Error).message).toMatch(/cannot take snapshots/);
      // Nor a filesystem-only pause: refused, never turned into a memory pause.
      const pause = await sbx.pause({ keepMemory: false }).catch((e: Error) => e);
      expect((pause as Error).message).toMatch(/cannot pause without memory/);
      expect((await sbx.getInfo()).state).toBe("running");
      expect(await sbx.isRunning()).toBe(true);
      expect(readdirSync(join(cp.dataDir, "snapshots"))).toEqual([]);
      await sbx.kill();
    } finally {
      restore();
      await cp.close();
    }
  });
});
