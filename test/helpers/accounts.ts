// The accounts an envd run on the host by a test knows, written by the test
// instead of read from the host. envd run as root acts as `user` when its
// passwd has one (as every sandbox image has), and a host may or may not have
// an ordinary account of that name (many VM images do); `nobody`'s home is
// /nonexistent on Debian and / elsewhere. So each such envd is told whom it
// acts as (SELF unless the test says otherwise) and, when it runs in the test
// process, gets a passwd and group of the test's own (testEtc).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";

export interface Account {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/** The user the tests run as (root in CI): the user a test's envd acts as unless the test names another. */
export const SELF: Account = (() => {
  const u = userInfo();
  return { name: u.username, uid: u.uid, gid: u.gid, home: u.homedir };
})();

/** Another user, for "as someone else" tests: uid and gid 65534, whatever the host calls them. */
export const NOBODY: Account = { name: "nobody", uid: 65534, gid: 65534, home: "/nonexistent" };

/** root, SELF when it is not root, NOBODY, then `extra`: what envd's passwd and group hold. */
export function testAccounts(extra: Account[] = []): Account[] {
  const root: Account = { name: "root", uid: 0, gid: 0, home: "/root" };
  return [root, ...(SELF.uid === 0 ? [] : [SELF]), NOBODY, ...extra];
}

/** A directory holding passwd and group for `accounts` (envd's `etc` option); `remove()` deletes it. */
export function testEtc(accounts: Account[] = testAccounts()): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), "locale2b-test-etc-"));
  writeFileSync(join(dir, "passwd"), accounts.map((a) => `${a.name}:x:${a.uid}:${a.gid}::${a.home}:/bin/sh\n`).join(""));
  const groups = new Map(accounts.map((a) => [a.gid, a.gid === NOBODY.gid ? "nogroup" : a.name]));
  writeFileSync(join(dir, "group"), [...groups].map(([gid, name]) => `${name}:x:${gid}:\n`).join(""));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
