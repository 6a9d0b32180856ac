import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startControlPlane, type ControlPlaneOptions, type RunningControlPlane } from "../../control-plane/server.js";
import { imagesDir } from "../../control-plane/images/layout.js";
import { removeOrphanImages } from "../../control-plane/templates/image-output.js";

export interface TestControlPlane extends RunningControlPlane {
  apiKey: string;
  dataDir: string;
  /** Env for an E2B SDK pointed at this server (JS or Python). */
  sdkEnv: Record<string, string>;
  /** Stops the server as `serve` does on SIGTERM: its sandboxes keep running for the next start. */
  stopKeepingSandboxes(): Promise<void>;
}

/**
 * A real control plane on 127.0.0.1 with a random port, its own data dir
 * and API key, on the process runtime. close() kills its sandboxes.
 * Needs `npm run build` (envd runs from dist/); npm test does it.
 */
export async function startTestControlPlane(opts: Partial<ControlPlaneOptions> = {}): Promise<TestControlPlane> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), "locale2b-cp-"));
  const apiKey = opts.apiKey ?? `e2b_${randomBytes(20).toString("hex")}`;
  const cp = await startControlPlane({ host: "127.0.0.1", port: 0, ...opts, dataDir, apiKey }).catch((err: unknown) => {
    // A start that fails (some tests expect it to) leaves no temporary data dir behind.
    if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    throw err;
  });
  return {
    ...cp,
    apiKey,
    dataDir,
    sdkEnv: { E2B_API_URL: cp.url, E2B_SANDBOX_URL: cp.url, E2B_API_KEY: apiKey },
    stopKeepingSandboxes: () => cp.close(),
    async close() {
      try {
        for (const s of cp.manager.list()) await cp.manager.kill(s.id).catch(() => undefined);
        await cp.close();
      } finally {
        // Also after stopKeepingSandboxes() (a second close throws): the temporary data dir never outlives the test,
        // nor do the images of the templates it built (in the shared image cache).
        if (!opts.dataDir) {
          rmSync(dataDir, { recursive: true, force: true });
          await removeOrphanImages(opts.imagesDir ?? imagesDir(), dataDir, () => false);
        }
      }
    },
  };
}
