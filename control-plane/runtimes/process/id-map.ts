// The host uids and gids a sandbox's own ids map to. Root inside a sandbox
// (id 0) is host id `base`, `user` (1000) is base + 1000, and so on for 65536
// ids: one range shared by every sandbox, as Docker's userns-remap does (mount
// and pid namespaces already keep sandboxes apart), registered in
// /etc/subuid and /etc/subgid under the name `locale2b` so that useradd and
// other tools never hand those ids to anyone else.
import { appendFileSync, readFileSync } from "node:fs";
import { setting } from "../../settings.js";

export const ID_COUNT = 65536;
const OWNER = "locale2b";
/** Where new ranges start looking: above shadow-utils' SUB_UID_MIN default, 65536-aligned. */
const FIRST_BASE = 0x100000;

export interface IdRange {
  base: number;
  count: number;
  /** Where it came from, for start-up notes. */
  source: string;
}

interface Entry {
  name: string;
  start: number;
  count: number;
}

function entries(path: string): Entry[] {
  let text = "";
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return [];
  }
  const out: Entry[] = [];
  for (const line of text.split("\n")) {
    const [name, start, count] = line.trim().split(":");
    if (!name || start === undefined || count === undefined || line.trim().startsWith("#")) continue;
    const s = Number(start);
    const c = Number(count);
    if (Number.isInteger(s) && Number.isInteger(c) && c > 0) out.push({ name, start: s, count: c });
  }
  return out;
}

/** Ids /etc/passwd and /etc/group hand out (a range must not contain any of them). */
function accountIds(etc: string): number[] {
  const ids: number[] = [];
  for (const [file, cols] of [
    ["passwd", [2, 3]],
    ["group", [2]],
  ] as const) {
    try {
      for (const line of readFileSync(`${etc}/${file}`, "utf8").split("\n")) {
        const parts = line.split(":");
        for (const c of cols) {
          const n = Number(parts[c]);
          if (Number.isInteger(n)) ids.push(n);
        }
      }
    } catch {
      // no such file: nothing to avoid
    }
  }
  return ids;
}

const overlaps = (a: number, n: number, b: number, m: number) => a < b + m && b < a + n;

/**
 * The sandbox id range: LOCALE2B_ID_BASE when set, else the `locale2b`
 * entry both /etc/subuid and /etc/subgid have, else the first free
 * 65536-aligned range at or above 1048576, which is then registered in both
 * files (when /etc is writable; otherwise it is used unregistered and the
 * source says so).
 */
export function sandboxIdRange(env: NodeJS.ProcessEnv = process.env, etc = "/etc"): IdRange {
  if (setting("LOCALE2B_ID_BASE", env)) {
    const base = Number(setting("LOCALE2B_ID_BASE", env));
    if (!Number.isInteger(base) || base < 65536 || base + ID_COUNT > 0xffffffff) {
      throw new Error(`LOCALE2B_ID_BASE=${setting("LOCALE2B_ID_BASE", env)}: expected an integer from 65536 to ${0xffffffff - ID_COUNT}`);
    }
    return { base, count: ID_COUNT, source: "LOCALE2B_ID_BASE" };
  }
  const uids = entries(`${etc}/subuid`);
  const gids = entries(`${etc}/subgid`);
  const mine = (list: Entry[]) => list.find((e) => e.name === OWNER && e.count >= ID_COUNT);
  const u = mine(uids);
  const g = mine(gids);
  if (u && g && u.start === g.start) return { base: u.start, count: ID_COUNT, source: `${etc}/subuid and ${etc}/subgid (${OWNER})` };
  const others = [...uids, ...gids].filter((e) => e.name !== OWNER);
  const accounts = accountIds(etc);
  const free = (b: number) => !others.some((e) => overlaps(b, ID_COUNT, e.start, e.count)) && !accounts.some((id) => id >= b && id < b + ID_COUNT);
  // Half-registered (one file only): complete it when its range is still free.
  let base = (u ?? g) && free((u ?? g)!.start) ? (u ?? g)!.start : FIRST_BASE;
  while (!free(base)) base += ID_COUNT;
  try {
    for (const [file, has] of [
      ["subuid", u?.start === base],
      ["subgid", g?.start === base],
    ] as const) {
      if (!has) appendFileSync(`${etc}/${file}`, `${OWNER}:${base}:${ID_COUNT}\n`, { mode: 0o644 });
    }
    return { base, count: ID_COUNT, source: `registered in ${etc}/subuid and ${etc}/subgid (${OWNER})` };
  } catch (err) {
    return { base, count: ID_COUNT, source: `unregistered: cannot write ${etc}/subuid (${(err as Error).message})` };
  }
}
