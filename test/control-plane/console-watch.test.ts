// ConsoleWatch: how the qemu runtime learns that a guest's vsock is set up
// (the init's "listening" line on the serial console) before it first dials.
import { appendFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConsoleWatch } from "../../control-plane/runtimes/qemu/console-watch.js";

const dir = mkdtempSync(join(tmpdir(), "l2b-console-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const LINE = "locale2b-init: listening on vsock port 49983";

describe("ConsoleWatch", () => {
  it("is false until the file exists and holds the line, then stays true", () => {
    const path = join(dir, "a.log");
    const w = new ConsoleWatch(path, LINE);
    expect(w.seen()).toBe(false);
    appendFileSync(path, "[    0.21] SELinux: ...\r\n[    0.41] PCI: Fatal: No config space access function found\r\n");
    expect(w.seen()).toBe(false);
    appendFileSync(path, `${LINE}\r\n`);
    expect(w.seen()).toBe(true);
    rmSync(path);
    expect(w.seen()).toBe(true);
  });

  it("finds the line when it arrives in pieces across looks, after more than one read buffer of output", () => {
    const path = join(dir, "b.log");
    const w = new ConsoleWatch(path, LINE);
    appendFileSync(path, "x".repeat(100_000));
    expect(w.seen()).toBe(false);
    appendFileSync(path, LINE.slice(0, 20));
    expect(w.seen()).toBe(false);
    appendFileSync(path, LINE.slice(20));
    expect(w.seen()).toBe(true);
  });

  it("does not match a different port's line", () => {
    const path = join(dir, "c.log");
    appendFileSync(path, "locale2b-init: listening on vsock port 49982 (port forwarding)\n");
    expect(new ConsoleWatch(path, LINE).seen()).toBe(false);
  });
});
