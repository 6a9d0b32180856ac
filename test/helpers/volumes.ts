// What the volume suites of every runtime share (test/control-plane/volumes,
// test/gvisor/gvisor-volumes, test/vm/qemu-volumes): a command's result
// whatever its exit code, and the end of a suite.
import { rmSync } from "node:fs";
import { CommandExitError, Volume, type Sandbox } from "e2b";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import type { Runtime } from "../../control-plane/runtimes/runtime.js";
import { startTestControlPlane, type TestControlPlane } from "./control-plane.js";
import { testImagesDir } from "./vm.js";

export type Run = { stdout: string; stderr: string; exitCode: number };

/** `cmd` in the sandbox as `user` (or root): its output and exit code, also when it fails. */
export async function sh(sbx: Sandbox, cmd: string, user: "user" | "root" = "user"): Promise<Run> {
  try {
    const r = await sbx.commands.run(cmd, { user });
    return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode };
  } catch (err) {
    if (err instanceof CommandExitError) return { stdout: err.stdout, stderr: err.stderr, exitCode: err.exitCode };
    throw err;
  }
}

/**
 * A volume suite's end: its sandboxes killed, then every volume destroyed (a
 * mounted one is refused, and a volume's loop mount must go before the data
 * dir), the SDK's environment restored, the server closed and its data dir
 * removed (a restart test gives the second server the dir, so its close keeps it).
 */
export async function endVolumeSuite(o: { sandboxes: Sandbox[]; cp: TestControlPlane | undefined; restore: (() => void) | undefined }): Promise<void> {
  for (const s of o.sandboxes) await s.kill().catch(() => undefined);
  for (const v of await Volume.list().catch(() => [])) await Volume.destroy(v.volumeId).catch(() => undefined);
  o.restore?.();
  await o.cp?.close();
  if (o.cp) rmSync(o.cp.dataDir, { recursive: true, force: true });
}

/**
 * A server on `runtime` (gvisor, qemu) that starts a create on the process
 * runtime instead while `processNext()` says so: one volume mounted by both
 * kinds of sandbox at once.
 */
export function startBesideProcess(runtime: Runtime, processNext: () => boolean, over: Partial<Parameters<typeof startTestControlPlane>[0]> = {}): Promise<TestControlPlane> {
  return startTestControlPlane({
    runtime,
    imagesDir: testImagesDir(),
    warmPool: 0,
    createRuntime: async (name) => {
      if (name !== "process") throw new Error(`unexpected runtime ${name}`);
      return new ProcessRuntime({ imagesDir: testImagesDir() });
    },
    templateRuntime: () => (processNext() ? "process" : undefined),
    ...over,
  });
}
