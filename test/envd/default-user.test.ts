// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// envd's own choice of default user (envd --help): run as root it acts as
// `user` when its passwd has that account (every sandbox image has it), else
// as root; run as anyone else, as itself. The rest of the suite names the user
// its envd acts as (test/helpers/accounts.ts); here the choice itself is tested,
// each envd with a passwd of the test's own, so the host's accounts play no part.
import { chownSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SELF, testAccounts, testEtc } from "../helpers/accounts.js";
import { clients, startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { run } from "../helpers/process.js";

const AS_ROOT = SELF.uid === 0;
const USER = { name: "user", uid: 1001, gid: 1001 };

let cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

/** envd with passwd and group holding testAccounts() and, when `withUser`, `user` (home made, owned by it); no default user given. */
async function envdWith(withUser: boolean): Promise<{ envd: TestEnvd; home: string }> {
  const base = mkdtempSync(join(tmpdir(), "locale2b-test-home-"));
  cleanup.push(() => rmSync(base, { recursive: true, force: true }));
  const home = join(base, "user");
  mkdirSync(home, { mode: 0o700 });
  if (AS_ROOT) chownSync(home, USER.uid, USER.gid);
  const etc = testEtc(testAccounts(withUser ? [{ ...USER, home }] : []));
  cleanup.push(etc.remove);
  // defaultUser present but undefined: envd picks, as when started without --user.
  const envd = await startTestEnvd({ etc: etc.dir, defaultUser: undefined });
  cleanup.push(() => envd.close());
  return { envd, home };
}

describe("envd's default user", () => {
  it.skipIf(!AS_ROOT)("as root with `user` in its passwd: acts as `user`, in that user's home", async () => {
    const { envd, home } = await envdWith(true);
    expect(envd.context.state.defaultUser).toBe("user");
    const r = await run(clients(envd.url).process, 'id -u; id -g; pwd; echo "$HOME $USER"');
    expect(r.stdout).toBe(`${USER.uid}\n${USER.gid}\n${home}\n${home} user\n`);
  });

  it.skipIf(!AS_ROOT)("as root without `user` in its passwd: acts as root, in /root", async () => {
    const { envd } = await envdWith(false);
    expect(envd.context.state.defaultUser).toBe("root");
    const r = await run(clients(envd.url).process, 'id -u; pwd; echo "$HOME $USER"');
    expect(r.stdout).toBe("0\n/root\n/root root\n");
  });

  it.skipIf(AS_ROOT)("as an ordinary user, even with `user` in its passwd: acts as itself", async () => {
    const { envd } = await envdWith(true);
    expect(envd.context.state.defaultUser).toBe(SELF.name);
    const r = await run(clients(envd.url).process, "id -u");
    expect(r.stdout).toBe(`${SELF.uid}\n`);
  });
});
