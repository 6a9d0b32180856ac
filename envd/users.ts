import { readFileSync, statSync } from "node:fs";

export interface User {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

interface Db {
  mtimeMs: number;
  byName: Map<string, User>;
  byUid: Map<number, string>;
  groupByGid: Map<number, string>;
  /** Supplementary groups by member name (the fourth field of /etc/group). */
  memberOf: Map<string, number[]>;
}

/**
 * Users and groups from /etc/passwd and /etc/group (the sandbox's own, not
 * NSS), re-read when either file changes, so `useradd` inside a sandbox is
 * seen at once.
 */
export class UserDb {
  private db: Db | undefined;

  constructor(private readonly etc = "/etc") {}

  private load(): Db {
    let mtimeMs = 0;
    try {
      mtimeMs = statSync(`${this.etc}/passwd`).mtimeMs + statSync(`${this.etc}/group`).mtimeMs;
    } catch {
      // missing files: empty database
    }
    if (this.db && this.db.mtimeMs === mtimeMs) return this.db;
    const byName = new Map<string, User>();
    const byUid = new Map<number, string>();
    const groupByGid = new Map<number, string>();
    const memberOf = new Map<string, number[]>();
    for (const line of readLines(`${this.etc}/passwd`)) {
      const [name, , uid, gid, , home, shell] = line.split(":");
      if (!name || uid === undefined || gid === undefined) continue;
      const user: User = { name, uid: Number(uid), gid: Number(gid), home: home || "/", shell: shell || "/bin/sh" };
      if (!byName.has(name)) byName.set(name, user);
      if (!byUid.has(user.uid)) byUid.set(user.uid, name);
    }
    for (const line of readLines(`${this.etc}/group`)) {
      const [name, , gid, members] = line.split(":");
      if (name && gid !== undefined && !groupByGid.has(Number(gid))) groupByGid.set(Number(gid), name);
      for (const m of (members ?? "").split(",").filter(Boolean)) memberOf.set(m, [...(memberOf.get(m) ?? []), Number(gid)]);
    }
    this.db = { mtimeMs, byName, byUid, groupByGid, memberOf };
    return this.db;
  }

  lookup(name: string): User | undefined {
    return this.load().byName.get(name);
  }

  userName(uid: number): string {
    return this.load().byUid.get(uid) ?? String(uid);
  }

  /** The supplementary groups /etc/group lists `name` in. */
  groupsOf(name: string): number[] {
    return this.load().memberOf.get(name) ?? [];
  }

  groupName(gid: number): string {
    return this.load().groupByGid.get(gid) ?? String(gid);
  }
}

function readLines(path: string): string[] {
  try {
    return readFileSync(path, "utf8").split("\n").filter((l) => l && !l.startsWith("#"));
  } catch {
    return [];
  }
}

/** The default user when none is configured: `user` when it exists, else envd's own user. */
export function pickDefaultUser(users: UserDb): string {
  if (process.getuid?.() === 0 && users.lookup("user")) return "user";
  return users.userName(process.getuid?.() ?? 0);
}
