// Snapshot names as E2B resolves them, and the list's page tokens: no server, no sandbox.
import { describe, expect, it } from "vitest";
import { ControlPlaneError } from "../../control-plane/domain/errors.js";
import { nameProblem, parseRef, refMatches, snapshotId, snapshotNames } from "../../control-plane/snapshots/names.js";
import { pageSnapshots } from "../../control-plane/snapshots/paging.js";
import type { SnapshotRecord } from "../../control-plane/domain/snapshot.js";

function snap(over: Partial<SnapshotRecord>): SnapshotRecord {
  return {
    id: "abc",
    tag: "default",
    sandboxId: "isrc",
    templateId: "base",
    runtime: "process",
    kind: "filesystem",
    build: "b",
    createdAt: 1,
    sizeBytes: 0,
    cpuCount: 1,
    memoryMB: 512,
    diskSizeMB: 1024,
    ...over,
  };
}

describe("snapshot names", () => {
  it("parses [namespace/]base[:tag] and refuses other shapes", () => {
    expect(parseRef("demo")).toEqual({ base: "demo" });
    expect(parseRef("local/demo:v1")).toEqual({ namespace: "local", base: "demo", tag: "v1" });
    expect(parseRef("demo:v1")).toEqual({ base: "demo", tag: "v1" });
    for (const bad of ["", "a/b/c", "a:b:c", "/x", "x:"]) expect(parseRef(bad), bad).toBeUndefined();
  });

  it("checks names given to create", () => {
    expect(nameProblem(parseRef("my-snap_1"), "my-snap_1")).toBeUndefined();
    expect(nameProblem(parseRef("local/x:v2.1"), "local/x:v2.1")).toBeUndefined();
    expect(nameProblem(parseRef("Upper"), "Upper")).toMatch(/lowercase/);
    expect(nameProblem(parseRef("team/x"), "team/x")).toMatch(/namespace of this server is 'local'/);
    expect(nameProblem(parseRef("a b"), "a b")).toMatch(/lowercase/);
    expect(nameProblem(undefined, "a/b/c")).toMatch(/expected name/);
  });

  it("ids and names as SnapshotInfo has them", () => {
    expect(snapshotId(snap({}))).toBe("abc:default");
    expect(snapshotNames(snap({}))).toEqual([]);
    expect(snapshotId(snap({ name: "demo", tag: "v1" }))).toBe("local/demo:v1");
    expect(snapshotNames(snap({ name: "demo", tag: "v1" }))).toEqual(["local/demo:v1"]);
  });

  it("a reference matches by id or name; the tag defaults to `default` where a snapshot is named, and is free in a list filter", () => {
    const s = snap({ name: "demo", tag: "v1" });
    expect(refMatches(s, parseRef("demo")!, true)).toBe(false);
    expect(refMatches(s, parseRef("demo")!, false)).toBe(true);
    expect(refMatches(s, parseRef("local/demo:v1")!, true)).toBe(true);
    expect(refMatches(s, parseRef("abc:v1")!, true)).toBe(true);
    expect(refMatches(s, parseRef("other/demo:v1")!, true)).toBe(false);
    expect(refMatches(s, parseRef("demo:v2")!, false)).toBe(false);
  });
});

describe("snapshot pages", () => {
  const all = [snap({ id: "c", createdAt: 3 }), snap({ id: "b", createdAt: 2 }), snap({ id: "a", createdAt: 2 }), snap({ id: "z", createdAt: 1 })];

  it("walks the list in order with tokens, and the last page has none", () => {
    const seen: string[] = [];
    let token: string | undefined;
    do {
      const { items, next } = pageSnapshots(all, 1, token);
      seen.push(...items.map((s) => s.id));
      token = next || undefined;
    } while (token);
    expect(seen).toEqual(["c", "b", "a", "z"]);
    expect(pageSnapshots(all, 10, undefined).next).toBe("");
  });

  it("a page boundary stays put when a newer snapshot arrives", () => {
    const first = pageSnapshots(all, 2, undefined);
    const grown = [snap({ id: "new", createdAt: 9 }), ...all];
    expect(pageSnapshots(grown, 2, first.next).items.map((s) => s.id)).toEqual(["a", "z"]);
  });

  it("a token that is not one is `invalid`, even on an empty list", () => {
    for (const bad of ["zzz", Buffer.from("[1,2]").toString("base64url")]) {
      expect(() => pageSnapshots([], 10, bad)).toThrow(ControlPlaneError);
    }
  });
});
