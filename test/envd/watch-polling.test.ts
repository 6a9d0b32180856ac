// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { EventType, type Filesystem, type FilesystemEvent } from "../../gen/ts/filesystem/filesystem_pb.js";
import { basicAuth, clients, PROTOCOLS } from "../helpers/envd.js";
import { envd, fresh, fs, rpcError, sleep, useTestEnvd, WAIT_MS, watching } from "../helpers/fs-fixtures.js";

const root = basicAuth("root");

useTestEnvd("watch");

describe("polling watchers", () => {
  async function poll(id: string, client: Client<typeof Filesystem>, cond: (evs: FilesystemEvent[]) => boolean): Promise<FilesystemEvent[]> {
    const all: FilesystemEvent[] = [];
    const deadline = Date.now() + WAIT_MS;
    while (!cond(all)) {
      if (Date.now() > deadline) throw new Error(`timed out polling watcher ${id}`);
      all.push(...(await client.getWatcherEvents({ watcherId: id }, { headers: root })).events);
      await sleep(20);
    }
    return all;
  }

  for (const protocol of PROTOCOLS) {
    it(`${protocol}: CreateWatcher, GetWatcherEvents, RemoveWatcher`, async () => {
      const client = clients(envd.url, protocol).fs;
      const dir = fresh();
      const { watcherId } = await client.createWatcher({ path: dir, includeEntry: true }, { headers: root });
      expect(watcherId).toMatch(/^w[a-z0-9]{20}$/);
      writeFileSync(join(dir, "polled.txt"), "");
      const evs = await poll(watcherId, client, (all) => all.some((e) => e.name === "polled.txt" && e.type === EventType.CREATE));
      expect(evs.find((e) => e.type === EventType.CREATE)?.entry?.path).toBe(join(dir, "polled.txt"));
      // Drained: the create is not returned again.
      const again = await client.getWatcherEvents({ watcherId }, { headers: root });
      expect(again.events.filter((e) => e.type === EventType.CREATE)).toEqual([]);
      await client.removeWatcher({ watcherId }, { headers: root });
      expect((await rpcError(client.getWatcherEvents({ watcherId }, { headers: root }))).code).toBe(Code.NotFound);
    });
  }

  it("collects recursive events until fetched, and refuses unknown ids", async () => {
    const dir = fresh();
    const { watcherId } = await fs.createWatcher({ path: dir, recursive: true }, { headers: root });
    mkdirSync(join(dir, "s"));
    await poll(watcherId, fs, (all) => all.some((e) => e.name === "s"));
    writeFileSync(join(dir, "s", "t.txt"), "x");
    const evs = await poll(watcherId, fs, (all) => all.some((e) => e.name === "s/t.txt" && e.type === EventType.CREATE));
    expect(evs.every((e) => e.entry === undefined)).toBe(true);
    expect(watching([dir, join(dir, "s")])).toBe(2);
    await fs.removeWatcher({ watcherId }, { headers: root });
    expect(watching([dir, join(dir, "s")])).toBe(0);
    const unknown = await rpcError(fs.getWatcherEvents({ watcherId: "wnotarealwatcher00000" }, { headers: root }));
    expect(unknown.code).toBe(Code.NotFound);
    expect(unknown.rawMessage).toContain("wnotarealwatcher00000");
    expect((await rpcError(fs.removeWatcher({ watcherId: "wnotarealwatcher00000" }, { headers: root }))).code).toBe(Code.NotFound);
    expect((await rpcError(fs.createWatcher({ path: join(dir, "nope") }, { headers: root }))).code).toBe(Code.NotFound);
  });

  it("an upload's events are there at once, as E2B's envd reports them: new file CREATE, CHMOD, WRITE; existing CHMOD, WRITE", async () => {
    const dir = fresh();
    const { watcherId } = await fs.createWatcher({ path: dir, recursive: true }, { headers: root });
    const upload = async (path: string, body: string) => {
      const r = await fetch(`${envd.url}/files?path=${encodeURIComponent(path)}&username=root`, {
        method: "POST",
        headers: { "content-type": "application/octet-stream" },
        body,
      });
      expect(r.status).toBe(200);
    };
    // One poll, right after each upload answered (no waiting): E2B's SDK tests do exactly that.
    const events = async () =>
      (await fs.getWatcherEvents({ watcherId }, { headers: root })).events.map((e) => `${EventType[e.type]} ${e.name}`);
    for (let i = 0; i < 10; i++) {
      await upload(join(dir, `f${i}.txt`), "content");
      expect(await events()).toEqual([`CREATE f${i}.txt`, `CHMOD f${i}.txt`, `WRITE f${i}.txt`]);
    }
    await upload(join(dir, "f0.txt"), "new content");
    expect(await events()).toEqual(["CHMOD f0.txt", "WRITE f0.txt"]);
    // A file written before its new directory is watched still shows its write.
    mkdirSync(join(dir, "sub"));
    writeFileSync(join(dir, "sub", "early.txt"), "x");
    const sub = await events();
    expect(sub).toContain("CREATE sub");
    expect(sub).toContain("WRITE sub/early.txt");
    // A failed upload (a directory in the way) leaves no events behind for the next poll to trip over.
    mkdirSync(join(dir, "taken"));
    const r = await fetch(`${envd.url}/files?path=${encodeURIComponent(join(dir, "taken"))}&username=root`, { method: "POST", body: "x" });
    expect(r.status).toBe(400);
    await upload(join(dir, "after.txt"), "x");
    expect((await events()).filter((e) => e.endsWith("after.txt"))).toEqual(["CREATE after.txt", "CHMOD after.txt", "WRITE after.txt"]);
    await fs.removeWatcher({ watcherId }, { headers: root });
  });

  it("reports an error instead of queueing more than 10000 unfetched events", async () => {
    const dir = fresh();
    const { watcherId } = await fs.createWatcher({ path: dir }, { headers: root });
    let err: unknown;
    // Synchronous writes keep this process's event loop (and so the in-process
    // envd) busy, so the watcher sees all of them as one burst; a round that
    // was drained early is simply repeated.
    for (let round = 0; round < 3 && !err; round++) {
      for (let i = 0; i < 10_100; i++) writeFileSync(join(dir, `r${round}-${i}`), "");
      const deadline = Date.now() + WAIT_MS;
      for (;;) {
        const res = await fs.getWatcherEvents({ watcherId }, { headers: root }).then(
          (r) => r.events.length,
          (e: unknown) => e,
        );
        if (typeof res !== "number") {
          err = res;
          break;
        }
        if (res > 0 || Date.now() > deadline) break;
        await sleep(50);
      }
    }
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Internal);
    expect((err as ConnectError).rawMessage).toContain("10000");
    // The error sticks until the watcher is removed.
    expect((await rpcError(fs.getWatcherEvents({ watcherId }, { headers: root }))).code).toBe(Code.Internal);
    await fs.removeWatcher({ watcherId }, { headers: root });
  });
});
