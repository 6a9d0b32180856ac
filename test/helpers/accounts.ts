// The accounts an envd run on the host by a test knows, written by the test
// instead of read from the host. envd run as root acts as `user` when its
// passwd has one (as every sandbox image has), and a host may or may not have
// an ordinary account of that name (many VM images do); `nobody`'s home is
// /nonexistent on Debian and / elsewhere. So each such envd is told whom it
// acts as (SELF unless the test says otherwise) and, when it runs in the test
// process, gets a passwd and group of the test's own (testEtc). The files that
// run envd on the host carry the vitest tag `host-envd`; scripts/test.mjs runs
// them again with a host account named `user` added, or removed if the host has
// one (LOCALE2B_TEST_HOST_USER=1, scripts/host-user.sh), and the helpers that
// start envd refuse to in an untagged file (requireHostEnvdTag).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { join, relative } from "node:path";
import { expect } from "vitest";

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

const tagged = new Set<string>();

/**
 * Throws unless the running test file carries the `host-envd` tag (a
 * `// @module-tag host-envd` line, or the tag on the tests that start envd):
 * an untagged file would escape the host-user pass of scripts/test.mjs.
 */
export function requireHostEnvdTag(): void {
  const file = expect.getState().testPath;
  if (!file || tagged.has(file)) return;
  if (!readFileSync(file, "utf8").includes("host-envd")) {
    throw new Error(
      `${relative(process.cwd(), file)} runs envd on the host: tag it host-envd (a \`// @module-tag host-envd\` line at its top) so that scripts/test.mjs runs it again with a host account named \`user\` added, or removed if the host has one (LOCALE2B_TEST_HOST_USER=1)`,
    );
  }
  tagged.add(file);
}
