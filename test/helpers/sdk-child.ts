// Drives test/helpers/sdk-child.mjs: the real `e2b` SDK in a child process
// with its own environment (a test CA in NODE_EXTRA_CA_CERTS, E2B_DOMAIN),
// optionally with wildcard DNS for a domain (test/helpers/wildcard-dns.cjs).
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { join } from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import { cleanEnv } from "./cli.js";

const here = fileURLToPath(new URL(".", import.meta.url));

export type ChildAnswer = Record<string, unknown> & { id: number; done?: boolean; event?: string; error?: string };

export interface SdkChild {
  /** Runs one op to its answer; `onEvent` gets its intermediate lines (stream's stdout chunks). */
  call(op: string, args?: Record<string, unknown>, onEvent?: (a: ChildAnswer) => void): Promise<ChildAnswer>;
  stderr(): string;
  close(): Promise<void>;
}

export function startSdkChild(env: Record<string, string>, opts: { wildcardDomain?: string } = {}): SdkChild {
  const args = [...(opts.wildcardDomain ? ["--require", join(here, "wildcard-dns.cjs")] : []), join(here, "sdk-child.mjs")];
  const child: ChildProcessWithoutNullStreams = spawn(process.execPath, args, {
    env: cleanEnv({ ...env, ...(opts.wildcardDomain ? { LOCALE2B_TEST_DNS_DOMAIN: opts.wildcardDomain } : {}) }),
    stdio: ["pipe", "pipe", "pipe"],
  });
  let err = "";
  child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
  const pending = new Map<number, { resolve: (a: ChildAnswer) => void; reject: (e: Error) => void; onEvent?: (a: ChildAnswer) => void }>();
  readline.createInterface({ input: child.stdout }).on("line", (line) => {
    const a = JSON.parse(line) as ChildAnswer;
    const p = pending.get(a.id);
    if (!p) return;
    if (!a.done) return p.onEvent?.(a);
    pending.delete(a.id);
    p.resolve(a);
  });
  const exited = new Promise<void>((r) => child.on("exit", () => r()));
  void exited.then(() => {
    for (const p of pending.values()) p.reject(new Error(`the SDK child exited:\n${err}`));
    pending.clear();
  });
  let next = 0;
  return {
    call(op, a = {}, onEvent) {
      const id = ++next;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject, onEvent });
        child.stdin.write(`${JSON.stringify({ ...a, op, id })}\n`);
      });
    },
    stderr: () => err,
    async close() {
      child.stdin.end();
      child.kill("SIGTERM");
      await exited;
    },
  };
}
