// Reading a sandbox's log never takes the whole file: what runs inside can make it huge.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { tailLines, timedLines } from "../../control-plane/host/log-tail.js";

const dir = mkdtempSync(join(tmpdir(), "l2b-tail-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("log tails", () => {
  it("returns the last lines among the last bytes, drops a cut first line and blank lines", () => {
    const file = join(dir, "a.log");
    writeFileSync(file, Array.from({ length: 100 }, (_, i) => `line ${i}`).join("\n") + "\n\n");
    expect(tailLines(file, 3)).toEqual(["line 97", "line 98", "line 99"]);
    // 20 bytes hold "e 97\nline 98\nline 99": the partial "e 97" is not a line.
    expect(tailLines(file, 10, 21)).toEqual(["line 98", "line 99"]);
    expect(tailLines(join(dir, "missing.log"), 5)).toEqual([]);
  });

  it("a JSON line keeps its own time; anything else gets the fallback", () => {
    expect(timedLines(['{"time":5,"msg":"x"}', "plain", "{not json"], 9).map((l) => l.timestamp)).toEqual([5, 9, 9]);
  });
});
