// Commands that push a sandbox past one of its limits, shared by the runtimes'
// suites (test/isolation/escapes.test.ts for process, test/gvisor/gvisor-resources.test.ts):
// each prints what happened to the offender, so a test can assert that it
// failed while the sandbox goes on.
import type { Sandbox } from "e2b";

/** Runs a shell command; never throws: exit code and stdout+stderr. */
export async function sh(s: Sandbox, command: string, user?: "root" | "user", timeoutMs = 180_000): Promise<{ code: number; out: string }> {
  try {
    const r = await s.commands.run(command, { ...(user ? { user } : {}), timeoutMs });
    return { code: r.exitCode, out: `${r.stdout}${r.stderr}` };
  } catch (err) {
    const e = err as { exitCode?: number; stdout?: string; stderr?: string; message: string };
    return { code: e.exitCode ?? -1, out: `${e.stdout ?? ""}${e.stderr ?? e.message}` };
  }
}

/** One process touching `totalMiB` in 64 MiB pieces (touched pages are charged, untouched calloc pages are not); prints `survived` if it was not stopped. */
export const memoryHog = (totalMiB: number) => `python3 -c "b=[b'x'*(64<<20) for _ in range(${Math.ceil(totalMiB / 64)})]; print('survived')"`;

/** `n` processes of 12 MiB each, alive together for a few seconds; prints `killed <how many failed>`. */
export const memoryBurst = (n = 70) =>
  `for i in $(seq ${n}); do python3 -c "b=bytearray(12<<20); import time; time.sleep(8)" & done; fails=0; for j in $(jobs -p); do wait $j || fails=$((fails+1)); done; echo "killed $fails"`;

/** Forks until refused (each child a small `sleep`); prints `stopped <children> <strerror>`, then reaps them. */
export const processBomb = `
import os, signal
kids = []
try:
    while len(kids) < 5000:
        pid = os.fork()
        if pid == 0:
            os.execv("/bin/sleep", ["sleep", "30"])
        kids.append(pid)
except OSError as e:
    print("stopped", len(kids), e.strerror)
for k in kids: os.kill(k, signal.SIGKILL)
for k in kids: os.waitpid(k, 0)
`;

/** Starts threads until refused; prints `stopped <threads> <error>` (or `unrefused <n>`). */
export const threadBomb = `
import threading, time
n = 0
try:
    while n < 10000:
        threading.Thread(target=time.sleep, args=(20,), daemon=True).start(); n += 1
    print("unrefused", n)
except Exception as e:
    print("stopped", n, e)
`;

/** Fills a file system with `mib` MiB at `path`; prints dd's words (`No space left on device` when full), then removes the file. */
export const fill = (path: string, mib: number) => `dd if=/dev/zero of=${path} bs=1M count=${mib} 2>&1; rm -f ${path}`;
