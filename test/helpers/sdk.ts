import type { Hash } from "node:crypto";
import { Sandbox } from "e2b";
import { startTestEnvd, type TestEnvd } from "./envd.js";

/**
 * The environment a user sets to point the `e2b` SDK at one local envd:
 * `E2B_DEBUG=true` (create/connect make no control-plane call, envd version is
 * assumed to be 99.99.99, no access token) and `E2B_SANDBOX_URL` (all envd
 * traffic goes there instead of the hard-coded http://localhost:49983).
 */
const DEBUG_ENV = ["E2B_DEBUG", "E2B_SANDBOX_URL"] as const;

export interface SdkSandbox {
  envd: TestEnvd;
  /** Created with `Sandbox.create()` under the debug environment. */
  sandbox: Sandbox;
  /** Restores the environment and stops envd. */
  close(): Promise<void>;
}

/**
 * Starts a real envd and a `Sandbox` on it in debug mode, configured through
 * the environment exactly as a user would. The variables stay set until
 * `close()` so that `Sandbox.connect()` in a test resolves to the same envd.
 * vitest runs each test file in its own process, so files do not interfere.
 */
export async function startSdkSandbox(): Promise<SdkSandbox> {
  const envd = await startTestEnvd();
  const restore = setEnv(Object.fromEntries(DEBUG_ENV.map((k) => [k, undefined])));
  process.env.E2B_DEBUG = "true";
  process.env.E2B_SANDBOX_URL = envd.url;
  const sandbox = await Sandbox.create();
  return {
    envd,
    sandbox,
    async close() {
      restore();
      await envd.close();
    },
  };
}

/** Sets (or, for undefined, unsets) environment variables; the returned function puts them back. */
export function setEnv(vars: Record<string, string | undefined>): () => void {
  const saved = Object.keys(vars).map((k) => [k, process.env[k]] as const);
  const apply = (entries: Iterable<readonly [string, string | undefined]>) => {
    for (const [k, v] of entries) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  apply(Object.entries(vars));
  return () => apply(saved);
}

/**
 * `size` bytes (a multiple of 4) of xorshift32 output as a pull-based stream
 * of 1 MiB chunks, hashed into `hash` as they are produced.
 */
export function pseudoRandomStream(size: number, seed: number, hash: Hash): ReadableStream<Uint8Array> {
  let x = seed >>> 0 || 1;
  let produced = 0;
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        if (produced >= size) {
          controller.close();
          return;
        }
        const len = Math.min(1024 * 1024, size - produced);
        const chunk = new Uint8Array(len);
        const words = new Uint32Array(chunk.buffer, 0, len >>> 2);
        for (let i = 0; i < words.length; i++) {
          x ^= x << 13;
          x ^= x >>> 17;
          x ^= x << 5;
          words[i] = x >>> 0;
        }
        hash.update(chunk);
        produced += len;
        controller.enqueue(chunk);
      },
    },
    { highWaterMark: 0 },
  );
}

export { WAIT_MS, waitFor } from "./wait.js";

/** Collects PTY bytes (`onData`) as text, decoding UTF-8 across chunk boundaries. */
export function terminal(): { onData: (data: Uint8Array) => void; text: () => string } {
  const decoder = new TextDecoder();
  let text = "";
  return {
    onData: (data) => {
      text += decoder.decode(data, { stream: true });
    },
    text: () => text,
  };
}

/** What a promise rejected with (fails the test if it resolved). */
export async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error("expected the call to fail, but it succeeded");
}
