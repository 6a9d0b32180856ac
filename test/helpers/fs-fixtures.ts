// The fixture the envd filesystem and watch suites share (test/envd/filesystem*.test.ts,
// test/envd/watch*.test.ts): one in-process envd per test file with a
// Filesystem client, fresh directories in its temp dir, and what the watch
// suites look at. Call useTestEnvd() once at the top of a file; `envd` and
// `fs` are set before its tests run.
import { ConnectError, type Client } from "@connectrpc/connect";
import { mkdirSync, readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, expect } from "vitest";
import type { Filesystem } from "../../gen/ts/filesystem/filesystem_pb.js";
import { clients, startTestEnvd, type TestEnvd } from "./envd.js";

/** Generous: only a hang should ever reach it. */
export const WAIT_MS = 20_000;

export let envd: TestEnvd;
export let fs: Client<typeof Filesystem>;
let n = 0;
let prefix = "case";

/** Starts envd before the file's tests and stops it after; fresh() names its directories `${dirPrefix}-N`. */
export function useTestEnvd(dirPrefix: string): void {
  prefix = dirPrefix;
  beforeAll(async () => {
    envd = await startTestEnvd();
    fs = clients(envd.url).fs;
  });
  afterAll(async () => {
    await envd?.close();
  });
}

/** A fresh directory inside the test's temp dir. */
export function fresh(): string {
  const dir = join(envd.dir, `${prefix}-${n++}`);
  mkdirSync(dir);
  return dir;
}

/** What an RPC failed with (fails the test unless it is a ConnectError). */
export async function rpcError(p: Promise<unknown>): Promise<ConnectError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

export { sleep } from "./wait.js";

/** Inodes this process (and so the in-process envd) holds inotify watches on, from /proc/self/fdinfo. */
function watchedInodes(): Set<bigint> {
  const inodes = new Set<bigint>();
  for (const fd of readdirSync("/proc/self/fd")) {
    let target = "";
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue;
    }
    if (target !== "anon_inode:inotify") continue;
    for (const m of readFileSync(`/proc/self/fdinfo/${fd}`, "utf8").matchAll(/^inotify wd:\S+ ino:([0-9a-f]+)/gm)) {
      inodes.add(BigInt(`0x${m[1]}`));
    }
  }
  return inodes;
}

/** How many of these directories are being watched. */
export function watching(dirs: string[]): number {
  const held = watchedInodes();
  return dirs.filter((d) => held.has(statSync(d, { bigint: true }).ino)).length;
}
