// The envd bundle a guest image carries: one file with its V8 code cache,
// started by envd.js, without control-plane code or SQLite in it.
import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { checkInputs, ensureEnvdBundle } from "../../control-plane/images/envd-bundle.js";
import { GUEST } from "../../control-plane/images/layout.js";
import { SELF } from "../helpers/accounts.js";
import { CLI } from "../helpers/cli.js";

const scratch = mkdtempSync(join(tmpdir(), "locale2b-envd-bundle-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("envd bundle inputs", () => {
  it("keeps control-plane code and SQLite out of the envd bundle", () => {
    expect(() => checkInputs(["envd/main.ts", "envd/command.ts", "gen/ts/process/process_pb.ts", "node_modules/pino/pino.js"])).not.toThrow();
    expect(() => checkInputs(["envd/main.ts", "control-plane/store/sqlite-store.ts"])).toThrow(/pulls in: control-plane\/store\/sqlite-store\.ts/);
    expect(() => checkInputs(["envd/command.ts", "control-plane/settings.ts"])).toThrow(/pulls in: control-plane\/settings\.ts/);
    expect(() => checkInputs(["node_modules/node-sqlite3-wasm/dist/node-sqlite3-wasm.js"])).toThrow(/node-sqlite3-wasm/);
  });
});

/** Starts `node <args>` as envd on 127.0.0.1:0; resolves with its URL and the ms until /health answered. */
async function startEnvd(args: string[]): Promise<{ url: string; ms: number; codeCache: string | undefined; stop: () => void }> {
  const started = performance.now();
  const child = spawn(process.execPath, [...args, "--listen", "tcp://127.0.0.1:0", "--user", SELF.name], {
    env: { ...process.env, LOCALE2B_LOG_LEVEL: "info", VITEST: "" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`envd did not start in 20 s: ${stderr}`)), 20_000);
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      stderr += d;
      const m = /"addresses":\["tcp:\/\/([^"]+)"/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(`http://${m[1]}`);
      }
    });
    child.on("exit", (code) => reject(new Error(`envd exited ${code}: ${stderr}`)));
  });
  const res = await fetch(`${url}/health`);
  const ms = performance.now() - started;
  expect(res.status).toBe(204);
  const codeCache = /"codeCache":"(\w+)"/.exec(stderr)?.[1];
  return { url, ms, codeCache, stop: () => child.kill("SIGTERM") };
}

// host-envd: starts envd on the host (test/helpers/accounts.ts).
describe("envd bundle", { tags: ["host-envd"] }, () => {
  it("bundles envd into one file with its V8 code cache, started by envd.js: it starts and answers /health", async () => {
    const images = join(scratch, "images");
    const b = await ensureEnvdBundle(images);
    expect(b.cached).toBe(false);
    expect(b.entry).toBe(join(images, "envd", b.hash16, "envd.js"));
    expect(JSON.parse(readFileSync(join(b.dir, "package.json"), "utf8")).type).toBe("commonjs");
    expect(statSync(join(b.dir, "envd-main.cjs.cache")).size).toBeGreaterThan(100_000);
    for (const p of ["@lydell/node-pty", "@lydell/node-pty-linux-x64", "@napi-rs/xattr", "@napi-rs/xattr-linux-x64-gnu"]) {
      if (process.arch === "x64" || !p.includes("x64")) expect(existsSync(join(b.dir, "node_modules", p, "package.json"))).toBe(true);
    }
    const text = readFileSync(join(b.dir, "envd-main.cjs"), "utf8");
    expect(text).not.toMatch(/node-sqlite3-wasm|SqliteStore/);
    expect((await ensureEnvdBundle(images)).cached).toBe(true);

    // As a sandbox starts it: the code cache is taken.
    const bundled = await startEnvd([...GUEST.nodeFlags, b.entry]);
    bundled.stop();
    expect(bundled.codeCache).toBe("used");
    const cli = await startEnvd([CLI, "envd"]);
    cli.stop();
    expect(cli.codeCache).toBeUndefined();

    // A cache V8 refuses (damaged, or made by another node) only costs the compile: envd starts all the same.
    const copy = join(scratch, "bundle-bad-cache");
    cpSync(b.dir, copy, { recursive: true });
    const cache = readFileSync(join(copy, "envd-main.cjs.cache"));
    cache.fill(0x5a, 16);
    writeFileSync(join(copy, "envd-main.cjs.cache"), cache);
    const refused = await startEnvd([...GUEST.nodeFlags, join(copy, "envd.js")]);
    refused.stop();
    expect(refused.codeCache).toBe("rejected");
    rmSync(join(copy, "envd-main.cjs.cache"));
    const without = await startEnvd([...GUEST.nodeFlags, join(copy, "envd.js")]);
    without.stop();
    expect(without.codeCache).toBe("none");
    console.log(
      `envd start-up to /health: bundle ${bundled.ms.toFixed(0)} ms (without its code cache ${without.ms.toFixed(0)}), dist CLI ${cli.ms.toFixed(0)} ms; ` +
        `envd-main.cjs ${Math.round(b.bytes / 1024)} KiB`,
    );
  });
});

