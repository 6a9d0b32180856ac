// envdCrashLoop: the reason a build sandbox's envd will not start, from the
// console lines the guest init writes (rootfs/init/envd.c).
import { describe, expect, it } from "vitest";
import { envdCrashLoop } from "../../control-plane/templates/envd-crash-loop.js";

const started = (pid: number) => `locale2b-init: envd started (pid ${pid})`;
const exited = (n: number, how = "exited with status 42") => `locale2b-init: envd ${how}; restarting it in ${100 * 2 ** n} ms (restart ${n + 1})`;

describe("envdCrashLoop", () => {
  it("says nothing before the third exit", () => {
    expect(envdCrashLoop([])).toBeUndefined();
    expect(envdCrashLoop([started(5), "oops", exited(0), started(6), "oops", exited(1)])).toBeUndefined();
    expect(envdCrashLoop([started(5), '{"msg":"envd listening"}'])).toBeUndefined();
  });

  it("quotes what envd printed before its last exit, and how it ended", () => {
    const lines = [started(5), "first try", exited(0), started(6), "second", exited(1), "locale2b-init: envd did not accept on /run/locale2b/envd.sock", started(7), "refuse.so: no", exited(2)];
    expect(envdCrashLoop(lines)).toBe("envd cannot start in this image: it exited with status 42, printing: refuse.so: no (3 times in a row)");
    const killed = [started(5), exited(0, "was killed by SIGSEGV"), started(6), exited(1, "was killed by SIGSEGV"), started(7), exited(2, "was killed by SIGSEGV")];
    expect(envdCrashLoop(killed)).toBe("envd cannot start in this image: it was killed by SIGSEGV and printed nothing (3 times in a row)");
  });

  it("quotes the init when it could not run envd at all, whichever line came first", () => {
    const cannot = "locale2b-init: cannot run envd (/opt/locale2b/node/bin/node): No such file or directory";
    const lines = [cannot, started(5), exited(0, "exited with status 127"), started(6), cannot, exited(1, "exited with status 127"), cannot, started(7), exited(2, "exited with status 127")];
    expect(envdCrashLoop(lines)).toBe(
      "envd cannot start in this image: it exited with status 127, printing: cannot run envd (/opt/locale2b/node/bin/node): No such file or directory (3 times in a row)",
    );
  });
});
