import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, Template } from "e2b";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { browserSkip as skip, launchBrowser, screenshotsDir, signIn, watchProblems } from "../helpers/dashboard-browser.js";
import { setEnv } from "../helpers/sdk.js";

// The dashboard's other pages in a real headless Chromium, against a real server on the process runtime,
// with real data made in the test by the unmodified E2B SDK (a template built, a snapshot taken, a process
// started): a sandbox's processes (one killed from the page), templates with a build's log live, snapshots
// (a sandbox started from one, then it deleted), API keys (one made, used, revoked, then refused), the audit
// log (a filter narrows it, the CSV export has exactly the filtered rows) and capacity. Names from inside a
// sandbox that hold HTML (a file, a command line, a key's name) are shown as text: no script runs.

if (skip) console.warn(`dashboard pages tests skipped: ${skip}`);

/** What would run if the page rendered these as HTML: a dialog, or a global set. */
const XSS_FILE = "<img src=x onerror=alert(1)>";
const XSS_CMD = "sleep 600 # <img src=x onerror=window.__xss=2>";
const XSS_KEY = "<img src=x onerror=alert(3)> ci";

describe.skipIf(skip !== undefined)(`the dashboard's pages in Chromium${skip ? ` (skipped: ${skip})` : ""}`, () => {
  let cp: TestControlPlane;
  let browser: Browser;
  let restoreEnv: () => void;
  let shots: string;
  const sandboxes: Sandbox[] = [];

  beforeAll(async () => {
    cp = await startTestControlPlane({ warmPool: 1, activity: { metricsIntervalMs: 1000 } });
    restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    shots = screenshotsDir();
    browser = await launchBrowser();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    for (const s of sandboxes) await s.kill().catch(() => false);
    restoreEnv?.();
    await cp?.close();
  });

  const shot = (page: Page, name: string) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  const nav = async (page: Page, label: string, path: string) => {
    await page.locator(`a[data-nav="${label}"]`).click();
    await page.waitForURL(`**${path}`);
  };

  it("shows processes, templates with live build logs, snapshots, keys, the audit log and capacity, with names as text", async () => {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
    const page = await signIn(context, cp.url, cp.apiKey);
    const problems = watchProblems(page);
    onTestFailed(async () => {
      await shot(page, "failed").catch(() => undefined);
    });
    const dialogs: string[] = [];
    // Only the page's own confirm() questions are expected; anything else (an alert) is a failure.
    page.on("dialog", (d) => {
      if (d.type() !== "confirm") dialogs.push(`${d.type()}: ${d.message()}`);
      void d.accept();
    });

    // Processes: one started through the SDK (its command line holds HTML) shows, and Kill ends it.
    const sbx = await Sandbox.create("base", { timeoutMs: 600_000 });
    sandboxes.push(sbx);
    await sbx.files.write(`/home/user/${XSS_FILE}`, "a file with an HTML name\n");
    const proc = await sbx.commands.run(XSS_CMD, { background: true });
    await page.goto(`${cp.url}/dashboard/sandboxes/${sbx.sandboxId}`);
    const procRow = page.locator(`[data-testid=processes] tr[data-pid="${proc.pid}"]`);
    await procRow.waitFor({ timeout: 20_000 });
    expect(await procRow.locator("td.cmd").innerText()).toContain(XSS_CMD);
    await page.locator(`tr[data-file="${XSS_FILE}"]`).waitFor({ timeout: 15_000 });
    expect(await page.locator(`tr[data-file="${XSS_FILE}"] a`).innerText()).toBe(XSS_FILE);
    await shot(page, "11-processes");
    await procRow.locator("button[data-action=kill-process]").click();
    await procRow.waitFor({ state: "detached", timeout: 15_000 });
    expect(await page.locator("[data-testid=processes] .error").count()).toBe(0);
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(proc.pid);
    await expect(proc.wait()).rejects.toThrow();
    // Bad input to the signal route: a clear 400, and 404 for a process that is gone.
    const { csrf_token } = (await (await context.request.get(`${cp.url}/dashboard/session`)).json()) as { csrf_token: string };
    const signal = (pid: string, body: unknown) =>
      context.request.post(`${cp.url}/dashboard/api/workspace/sandboxes/${sbx.sandboxId}/processes/${pid}/signal`, { headers: { "x-csrf-token": csrf_token }, data: body });
    const badPid = await signal("abc", { signal: "SIGKILL" });
    expect(badPid.status()).toBe(400);
    expect(((await badPid.json()) as { message: string }).message).toContain("is not a process id");
    const badSignal = await signal(String(proc.pid), { signal: "SIGHUP" });
    expect(badSignal.status()).toBe(400);
    expect(((await badSignal.json()) as { message: string }).message).toContain("SIGTERM (the default) or SIGKILL");
    expect((await signal(String(proc.pid), { signal: "SIGKILL" })).status()).toBe(404);

    // Templates: a build started now, its log followed live on the template's page until it is ready.
    const alias = `dash-pages-${process.pid}`;
    // A step no build ran before (steps are cached across builds by their text).
    const nonce = randomBytes(6).toString("hex");
    const bg = await Template.buildInBackground(Template().fromTemplate("base").runCmd(`echo dashboard-step-one ${nonce} && sleep 4 && echo dashboard-step-two`), alias);
    await nav(page, "Templates", "/dashboard/templates");
    const tplRow = page.locator(`tr[data-template-id="${bg.templateId}"]`);
    await tplRow.waitFor({ timeout: 15_000 });
    expect(await tplRow.innerText()).toContain(alias);
    await tplRow.locator("a").click();
    await page.waitForURL(`**/dashboard/templates/${bg.templateId}`);
    // The first line arrives while the build still runs (the step sleeps before its second line).
    await page.waitForFunction(
      () => {
        const log = (globalThis as unknown as { document: { querySelector(s: string): { innerText: string; getAttribute(n: string): string | null } | null } }).document.querySelector("[data-testid=build-log]");
        return !!log && log.getAttribute("data-build-status") === "building" && /\] dashboard-step-one \w+$/m.test(log.innerText) && !/\] dashboard-step-two$/m.test(log.innerText);
      },
      undefined,
      { timeout: 120_000 },
    );
    await page.locator("[data-testid=build-log][data-build-status=ready]").waitFor({ timeout: 120_000 });
    expect(await page.locator("[data-testid=build-log]").innerText()).toMatch(/\] dashboard-step-two$/m);
    await page.locator(`tr[data-build-id="${bg.buildId}"]`).waitFor();
    await shot(page, "12-template-build");

    // Snapshots: one taken with the SDK, listed with its sandbox; a sandbox started from it; then deleted.
    const snap = await Sandbox.createSnapshot(sbx.sandboxId);
    await nav(page, "Snapshots", "/dashboard/snapshots");
    const snapRow = page.locator(`tr[data-snapshot-id="${snap.snapshotId}"]`);
    await snapRow.waitFor({ timeout: 15_000 });
    expect(await snapRow.innerText()).toContain(sbx.sandboxId);
    await shot(page, "13-snapshots");
    await snapRow.locator("button[data-action=start-from-snapshot]").click();
    await page.waitForURL(/\/dashboard\/sandboxes\/[a-z0-9]+$/, { timeout: 60_000 });
    const started = new URL(page.url()).pathname.split("/").pop()!;
    expect(started).not.toBe(sbx.sandboxId);
    expect(cp.manager.get(started).state).toBe("running");
    sandboxes.push(await Sandbox.connect(started));
    await nav(page, "Snapshots", "/dashboard/snapshots");
    await page.locator(`tr[data-snapshot-id="${snap.snapshotId}"] button[data-action=delete-snapshot]`).click();
    await page.locator(`tr[data-snapshot-id="${snap.snapshotId}"]`).waitFor({ state: "detached", timeout: 15_000 });
    const left: string[] = [];
    const pager = Sandbox.listSnapshots();
    while (pager.hasNext) left.push(...(await pager.nextItems()).map((s) => s.snapshotId));
    expect(left).not.toContain(snap.snapshotId);

    // API keys: one made on the page (shown once, its name holding HTML) works with the SDK; revoked, it is refused.
    await nav(page, "API keys", "/dashboard/keys");
    const own = (await (await context.request.get(`${cp.url}/dashboard/session`)).json()) as { key_id: string };
    await page.locator(`tr[data-key-id="${own.key_id}"]`).waitFor();
    expect(await page.locator(`tr[data-key-id="${own.key_id}"] button[data-action=revoke-key]`).count()).toBe(0);
    await page.locator("input[name=key_name]").fill(XSS_KEY);
    await page.locator("button[data-action=create-key]").click();
    const newKey = await page.locator("[data-testid=new-key-value]").inputValue();
    expect(newKey).toMatch(/^e2b_[0-9a-f]{40}$/);
    const newId = (await page.locator("[data-testid=new-key] code").first().innerText()).trim();
    const keyRow = page.locator(`tr[data-key-id="${newId}"]`);
    await keyRow.waitFor();
    expect(await keyRow.innerText()).toContain(XSS_KEY);
    expect(await keyRow.innerText()).not.toContain(newKey);
    expect(await page.evaluate(() => JSON.stringify({ ...(globalThis as unknown as { localStorage: object }).localStorage }))).not.toContain(newKey);
    await Sandbox.list({ apiKey: newKey }).nextItems();
    await shot(page, "14-keys");
    await keyRow.locator("button[data-action=revoke-key]").click();
    await keyRow.waitFor({ state: "detached", timeout: 10_000 });
    await expect(Sandbox.list({ apiKey: newKey }).nextItems()).rejects.toThrow(/401|api key|unauthori[sz]ed|credentials/i);
    expect(await page.locator("[data-testid=new-key]").count()).toBe(0);

    // The audit log: filtered by action, then exported: the CSV has exactly the rows the server has for it.
    await nav(page, "Audit log", "/dashboard/audit");
    await page.locator("[data-testid=audit-entries] tbody tr").first().waitFor();
    const all = await page.locator("[data-testid=audit-entries] tbody tr").count();
    await page.locator("input[name=action]").fill("processes");
    await page.locator("input[name=sandbox_id]").fill(sbx.sandboxId);
    await page.locator("button[data-action=filter-audit]").click();
    await page.waitForFunction(
      () => {
        const d = (globalThis as unknown as { document: { querySelectorAll(s: string): ArrayLike<{ getAttribute(n: string): string | null }> } }).document;
        const rows = Array.from(d.querySelectorAll("[data-testid=audit-entries] tbody tr"));
        return rows.length > 0 && rows.every((r) => (r.getAttribute("data-audit-action") ?? "").includes("processes"));
      },
      undefined,
      { timeout: 10_000 },
    );
    const shown = await page.locator("[data-testid=audit-entries] tbody tr").count();
    expect(shown).toBeLessThan(all);
    // The kill from the page (200), then the three bad calls (400, 400, 404), newest first.
    const signalResults = await page.locator('[data-audit-action="POST /sandboxes/:id/processes/:pid/signal"] td.ok, [data-audit-action="POST /sandboxes/:id/processes/:pid/signal"] td.error').allInnerTexts();
    expect(signalResults).toEqual(["404", "400", "400", "200"]);
    await shot(page, "15-audit");
    const [download] = await Promise.all([page.waitForEvent("download"), page.locator("a[data-action=export-csv]").click()]);
    expect(download.suggestedFilename()).toBe("locale2b-audit.csv");
    const rows = readFileSync((await download.path())!, "utf8").trimEnd().split("\r\n");
    expect(rows[0]).toBe("id,time,actor,api,action,sandbox_id,result,status,message,duration_ms,details");
    const expected = (await (await context.request.get(`${cp.url}/dashboard/api/workspace/audit?action=processes&sandbox_id=${sbx.sandboxId}`)).text()).trim().split("\n");
    expect(rows.length - 1).toBe(expected.length);
    expect(rows.length - 1).toBe(shown);
    for (const r of rows.slice(1)) expect(r).toMatch(new RegExp(`,[^,]*processes[^,]*,${sbx.sandboxId},`));

    // Capacity: the host's sandboxes and memory against its limits, and the warm pool.
    await nav(page, "Capacity", "/dashboard/capacity");
    const live = cp.manager.list().length;
    await page.waitForFunction((n) => (globalThis as unknown as { document: { querySelector(s: string): { innerText: string } | null } }).document.querySelector("[data-meter=sandboxes]")?.innerText.includes(`${n} of `), live, { timeout: 10_000 });
    expect(await page.locator("[data-meter=memory-budget]").innerText()).toMatch(/\d+ of \d+ MiB/);
    expect(await page.locator("[data-meter=cpu-budget]").innerText()).toMatch(/\d+ of \d+ vCPUs given to sandboxes/);
    await page.locator('[data-testid=warm-pools] tr[data-pool="base"]').waitFor({ timeout: 10_000 });
    await shot(page, "16-capacity");

    // Nothing the sandbox named ran as script.
    expect(await page.evaluate(() => (globalThis as unknown as { __xss?: number }).__xss)).toBeUndefined();
    expect(dialogs).toEqual([]);
    expect(problems).toEqual([]);
    await context.close();
  }, 400_000);

  it("a sandbox, as user and as root, cannot reach the dashboard with a session it does not have", async () => {
    const sbx = await Sandbox.create("base", { timeoutMs: 600_000 });
    sandboxes.push(sbx);
    const port = new URL(cp.url).port;
    const keysBefore = (await cp.store.listApiKeys()).map((k) => k.id).sort();
    // Straight to the server's port (its loopback is not the sandbox's), with a made-up cookie and a guessed CSRF token.
    const probe = `exec 3<>/dev/tcp/127.0.0.1/${port} 2>/dev/null || { echo unreachable; exit 0; }
printf 'POST /dashboard/api/keys HTTP/1.0\\r\\nHost: 127.0.0.1:${port}\\r\\nCookie: l2b_dashboard=forged\\r\\nX-CSRF-Token: x\\r\\nContent-Type: application/json\\r\\nContent-Length: 15\\r\\n\\r\\n{"name":"evil"}' >&3
head -1 <&3`;
    for (const user of ["user", "root"] as const) {
      const r = await sbx.commands.run(`timeout 10 bash -c '${probe.replace(/'/g, "'\\''")}'`, { user, timeoutMs: 30_000 }).catch((e: { stdout?: string }) => ({ stdout: String(e.stdout ?? "") }));
      // Either the server is out of reach, or it refuses the cookie: never a key made.
      expect(r.stdout.trim(), user).toMatch(/^(unreachable|HTTP\/1\.[01] 401 .*|)$/);
    }
    expect((await cp.store.listApiKeys()).map((k) => k.id).sort()).toEqual(keysBefore);
  }, 120_000);
});
