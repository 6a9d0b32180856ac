// E2B's SDKs start commands through bash: commands.run as `/bin/bash -l -c
// <cmd>`, pty.create as `/bin/bash -i -l`. An image without bash (alpine,
// busybox and many slim images) still has a POSIX /bin/sh, which takes the
// same options (ash and dash know -l, -i and -c): there envd runs /bin/sh in
// bash's place, so the SDKs work on such images where E2B's envd would
// answer exit 127. Only for the exact path /bin/bash, and only when it is
// missing: wherever bash is, bash runs.
import { existsSync } from "node:fs";

const BASH = "/bin/bash";
const SH = "/bin/sh";

export function withShellFallback<T extends { cmd: string }>(spec: T): T {
  if (spec.cmd !== BASH || existsSync(BASH) || !existsSync(SH)) return spec;
  return { ...spec, cmd: SH };
}
