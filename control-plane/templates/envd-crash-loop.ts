// Why a sandbox's envd does not come up, read from its console. The init
// restarts an envd that exits (rootfs/init/envd.c: `envd exited with status
// N; restarting it in … ms`), so an image envd cannot run in (a library its
// loader is told to preload that exits, say) shows as exits in a row, not as
// a dead sandbox: a build gives up at the third, saying what envd printed
// before its last exit, rather than waiting out the start timeout.

/** Exits in a row that mean envd will not start here. */
export const ENVD_EXITS = 3;

const EXIT = /^locale2b-init: envd (exited with status \d+|was killed by SIG\w+); restarting/;
const START = /^locale2b-init: envd started/;
const RUN_FAILED = /^locale2b-init: (cannot run envd .*)/;

/** The reason, when `lines` (the console, oldest first) show envd exiting ENVD_EXITS times; else undefined. */
export function envdCrashLoop(lines: string[]): string | undefined {
  const exits = lines.flatMap((l, i) => (EXIT.test(l) ? [i] : []));
  if (exits.length < ENVD_EXITS) return undefined;
  // What came between its last two exits (what the started child printed may come before the init's `envd started`).
  const last = exits.at(-1)!;
  const printed = lines
    .slice(exits.at(-2)! + 1, last)
    .filter((l) => !START.test(l))
    // envd's own lines, and the init's when it could not run envd at all (`cannot run envd (…): …`).
    .filter((l) => (!l.startsWith("locale2b-init:") || RUN_FAILED.test(l)) && l.trim() !== "")
    .map((l) => l.replace(RUN_FAILED, "$1"))
    .slice(-5)
    .map((l) => (l.length > 300 ? `${l.slice(0, 297)}...` : l));
  const how = EXIT.exec(lines[last]!)![1];
  return `envd cannot start in this image: it ${how}${printed.length ? `, printing: ${printed.join(" | ")}` : " and printed nothing"} (${exits.length} times in a row)`;
}
