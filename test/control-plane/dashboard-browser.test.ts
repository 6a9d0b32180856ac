import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Sandbox } from "e2b";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { browserSkip as skip, launchBrowser, screenshotsDir, signIn as signInAt, watchProblems, type Win } from "../helpers/dashboard-browser.js";
import { setEnv } from "../helpers/sdk.js";

// The dashboard in a real headless Chromium (Debian's `chromium`, driven by playwright-core; no browser
// download) against a real server on the process runtime, with sandboxes made by the unmodified E2B SDK.
// Screenshots of each page go to $LOCALE2B_TEST_ARTIFACTS/dashboard-<random> (default: the temp dir); the
// path is printed. The other pages (processes, templates, snapshots, keys, audit, capacity): dashboard-pages.test.ts.

if (skip) console.warn(`dashboard browser tests skipped: ${skip}`);

describe.skipIf(skip !== undefined)(`the dashboard in Chromium${skip ? ` (skipped: ${skip})` : ""}`, () => {
  let cp: TestControlPlane;
  let browser: Browser;
  let restoreEnv: () => void;
  let shots: string;
  const sandboxes: Sandbox[] = [];

  beforeAll(async () => {
    cp = await startTestControlPlane({ warmPool: 0, activity: { metricsIntervalMs: 1000 } });
    restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined });
    shots = screenshotsDir();
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser?.close();
    for (const s of sandboxes) await s.kill().catch(() => false);
    restoreEnv?.();
    await cp?.close();
  });

  const shot = (page: Page, name: string) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });

  const signIn = (context: BrowserContext): Promise<Page> => signInAt(context, cp.url, cp.apiKey);

  /** The terminal's screen as text (xterm.js's DOM rows). */
  const screen = (page: Page) => page.locator(".xterm-rows").innerText();
  const waitForScreen = (page: Page, re: RegExp) =>
    page.waitForFunction((src) => new RegExp(src, "m").test((globalThis as unknown as Win).document.querySelector(".xterm-rows")?.innerText ?? ""), re.source, { timeout: 20_000 });

  it("signs in, shows an SDK sandbox live, runs a command in its terminal, follows resizes and reloads, kills it, signs out", async () => {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
    const page = await context.newPage();
    // Script errors and Content-Security-Policy refusals (the page must run under its own CSP).
    const problems = watchProblems(page);
    await page.goto(`${cp.url}/dashboard/`);
    await page.locator("input[name=api_key]").waitFor();
    await shot(page, "01-sign-in");
    await page.locator("input[name=api_key]").fill(cp.apiKey);
    await page.locator("button[type=submit]").click();
    await page.locator("table[data-testid=sandboxes]").waitFor();

    // The key is nowhere the page can read it back: not in the URL, storage or a script-readable cookie.
    const stored = await page.evaluate(() => {
      const w = globalThis as unknown as Win;
      return JSON.stringify({ local: { ...w.localStorage }, session: { ...w.sessionStorage }, cookie: w.document.cookie, url: w.location.href });
    });
    expect(stored).not.toContain(cp.apiKey);
    expect(stored).not.toContain("l2b_dashboard");
    const cookies = await context.cookies();
    expect(cookies).toEqual([expect.objectContaining({ name: "l2b_dashboard", httpOnly: true, sameSite: "Strict", path: "/dashboard" })]);
    expect(cookies[0]!.value).not.toContain(cp.apiKey);

    const sbx = await Sandbox.create("base", { metadata: { suite: "dashboard" }, timeoutMs: 600_000 });
    sandboxes.push(sbx);
    const row = page.locator(`tr[data-sandbox-id="${sbx.sandboxId}"]`);
    await row.waitFor({ timeout: 15_000 });
    expect(await row.getAttribute("data-state")).toBe("running");
    expect(await row.innerText()).toMatch(/\bbase\b[\s\S]*\bprocess\b/);
    // Its sparklines fill from the metrics history.
    await page.waitForFunction((id) => (globalThis as unknown as Win).document.querySelector(`tr[data-sandbox-id="${id}"] td.metric`)?.innerText.includes("%"), sbx.sandboxId, { timeout: 15_000 });
    await row.locator("td.metric svg path").first().waitFor({ timeout: 20_000 });
    await shot(page, "02-sandboxes");

    await row.locator("a").click();
    await page.waitForURL(`**/dashboard/sandboxes/${sbx.sandboxId}`);
    await page.locator("[data-terminal-state=connected]").waitFor({ timeout: 20_000 });
    await page.locator(".xterm").click();
    await page.keyboard.type("echo $((6*7))");
    await page.keyboard.press("Enter");
    await waitForScreen(page, /^42\s*$/);

    // The PTY follows the window: stty size before and after a narrower viewport.
    await page.keyboard.type("stty size");
    await page.keyboard.press("Enter");
    await waitForScreen(page, /^\d+ \d+\s*$/);
    const sizes = (text: string) => [...text.matchAll(/^(\d+) (\d+)\s*$/gm)].map((m) => Number(m[2]));
    const wide = sizes(await screen(page)).at(-1)!;
    await page.setViewportSize({ width: 900, height: 1000 });
    await page.waitForTimeout(600);
    await page.keyboard.type("clear; stty size");
    await page.keyboard.press("Enter");
    await page.waitForFunction(
      (w) => [...((globalThis as unknown as Win).document.querySelector(".xterm-rows")?.innerText ?? "").matchAll(/^(\d+) (\d+)\s*$/gm)].some((m) => Number(m[2]) < w),
      wide,
      { timeout: 10_000 },
    );
    await page.setViewportSize({ width: 1400, height: 1000 });

    // The charts take new samples as they come (every second here), and the events stream live.
    const points = async () => Number(await page.locator("[data-chart=CPU]").getAttribute("data-points"));
    const before = await points();
    await page.waitForFunction((n) => Number((globalThis as unknown as Win).document.querySelector("[data-chart=CPU]")?.getAttribute("data-points")) > n, before, { timeout: 15_000 });
    await page.locator('[data-event-type="exec.started"]').first().waitFor({ timeout: 15_000 });

    // Files: upload one from the browser, download one the SDK wrote; the audit panel shows the upload.
    await sbx.files.write("/home/user/from-sdk.txt", "written by the sdk\n");
    await page.locator("[data-testid=upload]").setInputFiles({ name: "from-browser.txt", mimeType: "text/plain", buffer: Buffer.from("uploaded from the dashboard\n") });
    await page.locator('tr[data-file="from-browser.txt"]').waitFor({ timeout: 15_000 });
    expect(await sbx.files.read("/home/user/from-browser.txt")).toBe("uploaded from the dashboard\n");
    const [download] = await Promise.all([page.waitForEvent("download"), page.locator('tr[data-file="from-sdk.txt"] a').click()]);
    expect(download.suggestedFilename()).toBe("from-sdk.txt");
    expect(readFileSync((await download.path())!, "utf8")).toBe("written by the sdk\n");
    await page.locator("[data-testid=audit] button").click();
    await page.locator('[data-audit-action="POST /sandboxes/:id/files/upload"]').first().waitFor({ timeout: 10_000 });
    await shot(page, "03-sandbox");

    // A reload re-attaches to the same shell: its screen comes back from the session's buffer.
    await page.locator(".xterm").click();
    await page.keyboard.type("export MARK=dashboard-$((1+1)); echo marked-$((3+4))");
    await page.keyboard.press("Enter");
    await waitForScreen(page, /^marked-7\s*$/);
    await page.reload();
    await page.locator("[data-terminal-state=connected]").waitFor({ timeout: 20_000 });
    await waitForScreen(page, /^marked-7\s*$/);
    await page.locator(".xterm").click();
    await page.keyboard.type("echo $MARK");
    await page.keyboard.press("Enter");
    await waitForScreen(page, /^dashboard-2\s*$/);

    // Snapshot and fork it (E2B's snapshot and fork routes): the fork is a new running sandbox.
    await page.locator("button[data-action=snapshot]").click();
    await page.locator("[data-testid=action-result]", { hasText: "snapshot" }).waitFor({ timeout: 60_000 });
    await page.locator("button[data-action=fork]").click();
    const fork = await page.locator("a[data-fork]").getAttribute("data-fork", { timeout: 60_000 });
    expect(fork).toMatch(/^[a-z0-9]+$/);
    expect(fork).not.toBe(sbx.sandboxId);
    expect(cp.manager.get(fork!).state).toBe("running");
    await shot(page, "04-snapshot-fork");

    // Pause, resume and set the timeout of the fork from the list.
    await page.locator("a.back").click();
    const forkRow = page.locator(`tr[data-sandbox-id="${fork}"]`);
    await forkRow.locator("button[data-action=pause]").click();
    await page.locator(`tr[data-sandbox-id="${fork}"][data-state="paused"]`).waitFor({ timeout: 20_000 });
    expect(cp.manager.get(fork!).state).toBe("paused");
    await forkRow.locator("button[data-action=resume]").click();
    await page.locator(`tr[data-sandbox-id="${fork}"][data-state="running"]`).waitFor({ timeout: 20_000 });
    await forkRow.locator("input[type=number]").fill("120");
    await forkRow.locator("button[data-action=timeout]").click();
    await expect.poll(() => Math.round((cp.manager.get(fork!).endAt - Date.now()) / 1000), { timeout: 10_000 }).toBeLessThanOrEqual(120);
    expect(cp.manager.get(fork!).endAt - Date.now()).toBeGreaterThan(100_000);

    // Kill it from the list: the row goes, and so does the sandbox.
    page.once("dialog", (d) => void d.accept());
    await page.locator(`tr[data-sandbox-id="${sbx.sandboxId}"] button[data-action=kill]`).click();
    await page.locator(`tr[data-sandbox-id="${sbx.sandboxId}"]`).waitFor({ state: "detached", timeout: 15_000 });
    expect(cp.manager.list({ states: ["creating", "running", "pausing", "paused", "resuming"] }).map((s) => s.id)).not.toContain(sbx.sandboxId);
    await shot(page, "05-killed");

    expect(problems).toEqual([]);

    // Sign out: the old cookie, replayed in a fresh browser, opens nothing.
    const old = await context.cookies();
    await page.locator("button[data-action=sign-out]").click();
    await page.locator("input[name=api_key]").waitFor();
    const replay = await browser.newContext();
    await replay.addCookies(old);
    const p2 = await replay.newPage();
    await p2.goto(`${cp.url}/dashboard/sandboxes/${sbx.sandboxId}`);
    await p2.locator("input[name=api_key]").waitFor();
    expect(new URL(p2.url()).pathname).toBe("/dashboard/");
    expect(await p2.evaluate(async () => (await fetch("/dashboard/api/workspace/sandboxes")).status)).toBe(401);
    await replay.close();
    await context.close();
  }, 180_000);

  it("shows nothing without a session, and refuses cross-site requests from another site's page", async () => {
    const sbx = await Sandbox.create("base", { metadata: { suite: "dashboard" }, timeoutMs: 600_000 });
    sandboxes.push(sbx);

    // No session: the inner page sends the browser to sign-in, and every API call is 401.
    const anon = await browser.newContext();
    const a = await anon.newPage();
    await a.goto(`${cp.url}/dashboard/sandboxes/${sbx.sandboxId}`);
    await a.locator("input[name=api_key]").waitFor();
    const statuses = await a.evaluate(async (id) => {
      const calls: [string, string][] = [
        ["GET", "/dashboard/api/workspace/sandboxes"],
        ["GET", `/dashboard/api/workspace/sandboxes/${id}/metrics`],
        ["GET", "/dashboard/api/workspace/events/stream"],
        ["POST", `/dashboard/api/e2b/sandboxes/${id}/pause`],
        ["DELETE", `/dashboard/api/e2b/sandboxes/${id}`],
        ["POST", `/dashboard/api/workspace/sandboxes/${id}/exec/start`],
        ["GET", "/dashboard/session"],
      ];
      return Promise.all(calls.map(async ([method, url]) => (await fetch(url, { method, headers: { "content-type": "application/json" } })).status));
    }, sbx.sandboxId);
    expect(statuses).toEqual([401, 401, 401, 401, 401, 401, 401]);
    await shot(a, "06-no-session");
    await anon.close();

    // Signed in, then lured to another site that posts to the dashboard: a form and a no-cors fetch.
    const context = await browser.newContext();
    const page = await signIn(context);
    const target = `${cp.url}/dashboard/api/e2b/sandboxes/${sbx.sandboxId}/pause`;
    const evil: Server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/html" }).end(`<!doctype html><body>
<script>fetch(${JSON.stringify(target)}, { method: "POST", credentials: "include", mode: "no-cors", body: "{}" }).finally(() => document.forms[0].submit());</script>
<form method="POST" action="${target}" enctype="text/plain"><input name='{"timeout":1,"x":"' value='"}'></form></body>`);
    });
    await new Promise<void>((r) => evil.listen(0, "127.0.0.1", r));
    const port = (evil.address() as AddressInfo).port;
    try {
      // localhost is another site than 127.0.0.1: the SameSite=Strict cookie is not even sent.
      await page.goto(`http://localhost:${port}/`);
      await page.waitForURL(target);
      expect(JSON.parse(await page.locator("body").innerText())).toMatchObject({ status: 401, error: "unauthenticated" });
      await shot(page, "07-cross-site-refused");
      // Another port of the same host is the same site but another origin: the cookie goes, Origin/Sec-Fetch-Site refuse it.
      await page.goto(`http://127.0.0.1:${port}/`);
      await page.waitForURL(target);
      expect(JSON.parse(await page.locator("body").innerText())).toMatchObject({ status: 403, error: "cross_site" });
      await shot(page, "08-cross-origin-refused");
    } finally {
      evil.close();
    }
    expect(cp.manager.get(sbx.sandboxId).state).toBe("running");
    await context.close();
  }, 120_000);
});
