// A fleet on one machine for the fleet tests (test/control-plane/fleet*.test.ts):
// a real Postgres, two `locale2b node` processes (the process runtime; n2 with an
// image cache of its own, as a second host has) and two `locale2b api`
// replicas. Each test file starts its own and stops it in afterAll.
import { randomBytes } from "node:crypto";
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect } from "vitest";
import { PgStore } from "../../control-plane/store/pg-store.js";
import { startCli, type Served } from "./cli.js";
import { ownImagesDir } from "./fleet-images.js";
import { postgresMissing, startPostgres, type TestPostgres } from "./postgres.js";

/** Why a fleet cannot run here, or undefined. */
export function fleetMissing(): string | undefined {
  return postgresMissing() ?? (process.getuid?.() !== 0 ? "the process runtime's sandboxes need root" : undefined);
}

export interface TestFleet {
  pg: TestPostgres;
  /** The fleet's database URL. */
  db: string;
  /** A store of the test's own on the fleet's Postgres (to see where sandboxes are). */
  store: PgStore;
  api1: Served;
  api2: Served;
  /** The API key the first replica made. */
  key: string;
  /** The fleet's node token. */
  token: string;
  nodes: Record<string, Served>;
  /** n2's image cache (n1 shares the machine's). */
  n2Images: string;
  /** Another replica (stopped with the fleet). */
  /** Another replica (`args` added to `locale2b api`'s). */
  startApi(args?: string[]): Promise<Served>;
  /** Starts node `name` (again, on the same data dir, after it was stopped). */
  /** A node (again, or a new one: `args` added to `locale2b node`'s). */
  startNode(name: string, args?: string[]): Promise<Served>;
  /** E2B SDK options through a replica. */
  opts(api: Served): { apiKey: string; apiUrl: string; sandboxUrl: string };
  nodeOf(sandboxId: string): Promise<string | undefined>;
  stop(): Promise<void>;
}

export async function startTestFleet(): Promise<TestFleet> {
  const token = randomBytes(32).toString("hex");
  /** Every replica and node has the same secrets key. */
  const secretsKey = randomBytes(32).toString("base64");
  const dirs: string[] = [];
  const procs: Served[] = [];
  const nodeDirs: Record<string, string> = {};
  const nodes: Record<string, Served> = {};
  const pg = await startPostgres();
  const db = await pg.database();
  const env = () => ({ LOCALE2B_DATABASE_URL: db, LOCALE2B_NODE_TOKEN: token, LOCALE2B_NO_IMAGE_BUILD: "1", LOCALE2B_SECRETS_KEY: secretsKey });
  const startApi = async (args: string[] = []) => {
    const s = await startCli(["api", "--port", "0", "--host", "127.0.0.1", ...args], env(), /E2B_API_URL=(\S+)\n[^]*E2B_API_KEY=[^\n]*\n/);
    procs.push(s);
    return s;
  };
  const api1 = await startApi();
  const key = /export E2B_API_KEY=(e2b_[0-9a-f]{40})/.exec(api1.banner)![1]!;
  const api2 = await startApi();
  expect(api2.banner).not.toMatch(/E2B_API_KEY=e2b_/); // one key, made by the first replica
  const n2Images = ownImagesDir(process.env.LOCALE2B_IMAGES_DIR!);
  dirs.push(n2Images);
  const startNode = async (name: string, args: string[] = []) => {
    if (!nodeDirs[name]) dirs.push((nodeDirs[name] = mkdtempSync(join(tmpdir(), `locale2b-fleet-${name}-`))));
    const s = await startCli(
      ["node", "--port", "0", "--host", "127.0.0.1", "--data-dir", nodeDirs[name]!, "--node-name", name, "--warm-pool", "0", "--domain", `localhost:${new URL(api1.url).port}`, ...args],
      { ...env(), ...(name === "n2" ? { LOCALE2B_IMAGES_DIR: n2Images } : {}) },
      /reach it at (http:\/\/\S+);/,
    );
    procs.push(s);
    nodes[name] = s;
    return s;
  };
  await startNode("n1");
  await startNode("n2");
  const store = await PgStore.open(db, { max: 2 });
  return {
    pg,
    db,
    store,
    api1,
    api2,
    key,
    token,
    nodes,
    n2Images,
    startApi,
    startNode,
    opts: (api) => ({ apiKey: key, apiUrl: api.url, sandboxUrl: api.url }),
    nodeOf: async (id) => (await store.getSandbox(id))?.node,
    async stop() {
      for (const s of procs) if (s.child.exitCode === null && s.child.signalCode === null) await s.stop();
      await store.close();
      await pg.stop();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
  };
}

/**
 * A fleet for the enclosing describe block: started in its beforeAll,
 * stopped in its afterAll; the returned object holds its parts from then on.
 */
export function useTestFleet(): TestFleet {
  const f = {} as TestFleet;
  beforeAll(async () => void Object.assign(f, await startTestFleet()), 120_000);
  afterAll(async () => {
    await f.stop?.();
  });
  return f;
}

/** A request with a Host of our choosing (getHost's `<port>-<id>.<domain>`), as a browser on wildcard DNS sends it. */
export function getWithHost(base: string, host: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { headers: { host, ...headers } }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode!, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

