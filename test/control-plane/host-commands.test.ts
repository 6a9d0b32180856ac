// The host commands a sandbox's start and end need (ip, nft, mkfs.ext4) are
// started by the init's spawn helper once a runtime offers it, not by
// forking the server (control-plane/host/commands.ts); they behave as
// execFile's did: output, stdin, exit codes, a missing program.
import { afterEach, describe, expect, it } from "vitest";
import { offerSpawnHelper, resetHostCommands, runCommand } from "../../control-plane/host/commands.js";
import { ensureInitBinary } from "../../control-plane/images/guest-init.js";
import { imagesDir } from "../../control-plane/images/layout.js";

const helperBinary = await ensureInitBinary(imagesDir());

/** The parent of the command that ran (`$PPID` of a shell): the helper's pid or ours. */
async function parentOfCommand(): Promise<number> {
  return Number((await runCommand("/bin/sh", ["-c", "echo $PPID"])).stdout.trim());
}

describe.each([
  ["through the spawn helper", true],
  ["with Node's spawn (no helper offered)", false],
])("host commands %s", (_name, withHelper) => {
  afterEach(() => resetHostCommands());

  const setUp = () => {
    resetHostCommands();
    if (withHelper) offerSpawnHelper(helperBinary);
  };

  it("starts the command from the helper, not by forking this process", async () => {
    setUp();
    const parent = await parentOfCommand();
    if (withHelper) expect(parent).not.toBe(process.pid);
    else expect(parent).toBe(process.pid);
  });

  it("returns stdout and stderr, and feeds `input` to stdin", async () => {
    setUp();
    const r = await runCommand("/bin/sh", ["-c", "cat; echo err >&2"], { input: "line one\nline two\n" });
    expect(r).toEqual({ stdout: "line one\nline two\n", stderr: "err\n" });
    // Without input, stdin is empty (not the server's).
    expect((await runCommand("/bin/sh", ["-c", "cat; echo end"])).stdout).toBe("end\n");
  });

  it("a command that fails rejects with its exit code and stderr, as execFile's error", async () => {
    setUp();
    const err = (await runCommand("/bin/sh", ["-c", "echo partial; echo 'ip: RTNETLINK answers: File exists' >&2; exit 2"]).catch((e) => e)) as {
      code?: number;
      stdout?: string;
      stderr?: string;
      message: string;
    };
    expect(err.code).toBe(2);
    expect(err.stdout).toBe("partial\n");
    expect(err.stderr).toContain("File exists");
    expect(err.message).toContain("Command failed: /bin/sh");
  });

  it("a program that does not exist rejects with ENOENT", async () => {
    setUp();
    const err = (await runCommand("/nonexistent/locale2b-no-such-tool", ["x"]).catch((e) => e)) as NodeJS.ErrnoException;
    expect(err.code).toBe("ENOENT");
    expect(err.message).toContain("/nonexistent/locale2b-no-such-tool");
  });

  it("large output arrives whole and in order", async () => {
    setUp();
    const r = await runCommand("/bin/sh", ["-c", "seq 1 200000"]);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines.length).toBe(200_000);
    expect(lines[0]).toBe("1");
    expect(lines[199_999]).toBe("200000");
  });

  it("runs commands concurrently (each gets its own output)", async () => {
    setUp();
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => runCommand("/bin/sh", ["-c", `echo ${i}`])));
    expect(results.map((r) => r.stdout)).toEqual(Array.from({ length: 20 }, (_, i) => `${i}\n`));
  });
});

describe("host commands: a helper that cannot be used", () => {
  afterEach(() => resetHostCommands());

  it("falls back to Node's spawn when the offered binary is no spawn helper", async () => {
    resetHostCommands();
    offerSpawnHelper("/bin/true");
    expect((await runCommand("/bin/sh", ["-c", "echo ok"])).stdout).toBe("ok\n");
    expect(await parentOfCommand()).toBe(process.pid);
  });

  it("starts a new helper when the one it had was killed", async () => {
    resetHostCommands();
    offerSpawnHelper(helperBinary);
    const first = await parentOfCommand();
    process.kill(first, "SIGKILL");
    await expect.poll(() => { try { process.kill(first, 0); return true; } catch { return false; } }).toBe(false);
    // The commands that notice run with Node's spawn; then they go through a new helper.
    expect((await runCommand("/bin/sh", ["-c", "echo again"])).stdout).toBe("again\n");
    const parents: number[] = [];
    await expect.poll(async () => parents[parents.push(await parentOfCommand()) - 1]).not.toBe(process.pid);
    expect(parents.at(-1)).not.toBe(first);
    expect(parents.length).toBeLessThanOrEqual(3);
  });
});
