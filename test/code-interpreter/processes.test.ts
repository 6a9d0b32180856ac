// The Code Interpreter server's own processes, each test on a server of its
// own: a kernel whose start a client walked away from is still the server's,
// SIGTERM ends running executions and every kernel, and the kernels'
// connection files sit where only the server's user can reach them.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { lines, text, type Line } from "./lines.js";
import { alive, codeInterpreterPython, procState, startCodeInterpreter } from "./server.js";

const venv = codeInterpreterPython();
const skip = "skip" in venv ? venv.skip : undefined;

describe.skipIf(skip !== undefined)(`Code Interpreter server: its own processes${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("a client that goes away while its context's kernel starts leaves no kernel unknown to the server", async () => {
    const own = await startCodeInterpreter((venv as { python: string }).python);
    try {
      // No bash context yet: this execution starts the default one. Abort once the start has begun.
      const abort = new AbortController();
      const req = fetch(`${own.url}/execute`, { method: "POST", body: JSON.stringify({ code: "echo hi", language: "bash" }), signal: abort.signal }).catch((e: Error) => e);
      await expect.poll(() => /"starting kernel", "language": "bash"/.test(own.log()), { timeout: 20_000 }).toBe(true);
      abort.abort();
      expect(await req).toBeInstanceOf(Error);
      // The start completes and the kernel becomes the bash default: the next bash execution uses it.
      const res = await fetch(`${own.url}/execute`, { method: "POST", body: JSON.stringify({ code: "echo $PPID", language: "bash" }) });
      const out = (await res.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l) as Line);
      const kernelPid = Number(text(out, "stdout").trim());
      const contexts = (await (await fetch(`${own.url}/contexts`)).json()) as { language: string }[];
      expect(contexts.map((c) => c.language).sort()).toEqual(["bash", "javascript", "python"]);
      // One kernel per context among the server's children, the bash one being the one that answered.
      const kernels = childrenOf(own.child.pid!);
      expect(kernels).toHaveLength(3);
      expect(kernels).toContain(kernelPid);
    } finally {
      await own.stop();
    }
  });


  it("SIGTERM while code runs in every language: the running executions end with an error, the server exits by itself", async () => {
    const own = await startCodeInterpreter((venv as { python: string }).python);
    try {
      const codes = { python: "import time\nprint('go', flush=True)\ntime.sleep(3600)", javascript: "console.log('go'); while (true) {}", bash: "echo go; sleep 3600" };
      const streams = await Promise.all(
        Object.entries(codes).map(async ([language, code]) => {
          const res = await fetch(`${own.url}/execute`, { method: "POST", body: JSON.stringify({ code, language }) });
          const it = lines(res);
          expect((await it.next()).value).toMatchObject({ type: "stdout" });
          return it;
        }),
      );
      const runtimeDir = JSON.parse(own.log().split("\n").find((l) => l.includes('"listening"'))!).runtimeDir as string;
      own.child.kill("SIGTERM");
      for (const it of streams) {
        const rest: Line[] = [];
        for await (const line of it) rest.push(line);
        expect(rest).toEqual([{ type: "error", name: "ContextRestarted", value: "the context was removed while this code ran", traceback: "" }, { type: "end_of_execution" }]);
      }
      // Exited by itself: stop() would report SIGKILL had it had to use it.
      expect(await own.stop()).toBe(0);
      expect(existsSync(runtimeDir)).toBe(false);
    } finally {
      await own.stop();
    }
  });

  it("kernel connection files and IPC sockets sit in a directory only the server's user can enter; SIGTERM stops every kernel and removes it", async () => {
    const own = await startCodeInterpreter((venv as { python: string }).python);
    try {
      const runtimeDir = JSON.parse(own.log().split("\n").find((l) => l.includes('"listening"'))!).runtimeDir as string;
      expect(statSync(runtimeDir).mode & 0o777).toBe(0o700);
      expect(readdirSync(runtimeDir).some((f) => f.endsWith(".json"))).toBe(true);
      const pids: number[] = [];
      const codes = { python: "import os; print(os.getpid())", javascript: "console.log(process.pid, process.ppid)", bash: "echo $PPID" };
      for (const [language, code] of Object.entries(codes)) {
        const res = await fetch(`${own.url}/execute`, { method: "POST", body: JSON.stringify({ code, language }) });
        const out = (await res.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l) as Line);
        pids.push(...text(out, "stdout").trim().split(" ").map(Number));
      }
      expect(pids).toHaveLength(4);
      expect(pids.filter((p) => !alive(p))).toEqual([]);
      expect(await own.stop()).toBe(0);
      await expect.poll(() => pids.filter(alive).map((p) => `${p}: ${procState(p)}`), { timeout: 10_000 }).toEqual([]);
      expect(existsSync(runtimeDir)).toBe(false);
    } finally {
      await own.stop();
    }
  });
});

/** The pids whose parent is `pid`. */
function childrenOf(pid: number): number[] {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        // stat: "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
        return Number(readFileSync(`/proc/${d}/stat`, "utf8").split(") ")[1]!.split(" ")[1]) === pid;
      } catch {
        return false;
      }
    })
    .map(Number);
}
