import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { findExecutable } from "../control-plane/host/executables.js";
import { startControlPlaneChild, type ControlPlaneChild } from "./lib/control-plane.js";
import { processCpuSeconds } from "./lib/cpu.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtMs, heading, printTable, verdict } from "./lib/report.js";
import { median } from "./lib/stats.js";

/**
 * `npm run bench -- dashboard`: the web dashboard in headless Chromium
 * (Debian's `chromium`, LOCALE2B_CHROMIUM) against `locale2b serve`
 * (process runtime, no warm pool):
 * 1. its first load with an empty cache: bytes transferred (headers and
 *    bodies, as Chromium counts them) and the time until the sign-in form
 *    takes input; then sign-in until the list shows every sandbox;
 * 2. each other page, reached from the top bar of a signed-in page, until
 *    it shows its data (with those sandboxes running);
 * 3. the server's CPU while LOCALE2B_BENCH_DASHBOARDS (5) signed-in pages
 *    watch LOCALE2B_BENCH_DASHBOARD_SANDBOXES (100) running sandboxes, for
 *    LOCALE2B_BENCH_DASHBOARD_SECONDS (30), against the same server with
 *    the same sandboxes and no page open, measured before and after (the
 *    pages' first loads, every sparkline's history, done before).
 */

const GOAL_FIRST_LOAD_KIB = 256;
const GOAL_INTERACTIVE_MS = 1000;
/** CPU the open dashboards add, in % of one core. */
const GOAL_ADDED_CPU_PCT = 10;

function cpuPercent(cp: ControlPlaneChild, seconds: number): Promise<number> {
  const c0 = processCpuSeconds(cp.pid);
  const t0 = performance.now();
  return new Promise((resolve) =>
    setTimeout(() => resolve(((processCpuSeconds(cp.pid) - c0) / ((performance.now() - t0) / 1000)) * 100), seconds * 1000),
  );
}

async function signIn(page: Page, cp: ControlPlaneChild, sandboxes: number): Promise<number> {
  const t0 = performance.now();
  await page.locator("input[name=api_key]").fill(cp.apiKey);
  await page.locator("button[type=submit]").click();
  await page.waitForFunction((n) => (globalThis as unknown as { document: { querySelectorAll(s: string): { length: number } } }).document.querySelectorAll("tr[data-sandbox-id]").length >= n, sandboxes, {
    timeout: 60_000,
  });
  return performance.now() - t0;
}

/** One first load in a fresh context (empty cache): bytes, time to the form, time to the full list after sign-in. */
async function firstLoad(browser: Browser, cp: ControlPlaneChild, sandboxes: number): Promise<{ bytes: number; interactiveMs: number; listMs: number; context: BrowserContext }> {
  const context = await browser.newContext();
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send("Network.enable");
  let bytes = 0;
  cdp.on("Network.loadingFinished", (e: { encodedDataLength: number }) => (bytes += e.encodedDataLength));
  const t0 = performance.now();
  await page.goto(`${cp.url}/dashboard/`);
  await page.locator("input[name=api_key]").waitFor();
  const interactiveMs = performance.now() - t0;
  const loaded = bytes;
  const listMs = await signIn(page, cp, sandboxes);
  return { bytes: loaded, interactiveMs, listMs, context };
}

/** The top bar's pages, and what each shows once its data is in (the sandboxes' count on capacity). */
const PAGES: [string, string][] = [
  ["Templates", "tr[data-template-id]"],
  ["Snapshots", ".table-wrap:has([data-testid=snapshots]) ~ p, tr[data-snapshot-id]"],
  ["API keys", "tr[data-key-id]"],
  ["Audit log", "[data-testid=audit-entries] tbody tr"],
  ["Capacity", "[data-meter=sandboxes]"],
  ["Sandboxes", "tr[data-sandbox-id]"],
];

/** Each page from the top bar of a signed-in page: ms until its data shows (one visit each, in a warm context). */
async function pageTimes(browser: Browser, cp: ControlPlaneChild, sandboxes: number): Promise<[string, string][]> {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    await page.goto(`${cp.url}/dashboard/`);
    await signIn(page, cp, sandboxes);
    const rows: [string, string][] = [];
    for (const [label, shows] of PAGES) {
      const t0 = performance.now();
      await page.locator(`a[data-nav="${label}"]`).click();
      await page.locator(shows).first().waitFor({ timeout: 60_000 });
      rows.push([label, fmtMs(performance.now() - t0)]);
    }
    return rows;
  } finally {
    await context.close();
  }
}

export async function benchDashboard(): Promise<GoalResult[]> {
  const browserPath = findExecutable("chromium", process.env.LOCALE2B_CHROMIUM) ?? findExecutable("chromium-browser");
  if (!browserPath) throw new Error("no Chromium: install Debian's (scripts/setup-browser.sh, or apt-get install chromium) or set LOCALE2B_CHROMIUM");
  const nSandboxes = envInt("LOCALE2B_BENCH_DASHBOARD_SANDBOXES", 100);
  const nDashboards = envInt("LOCALE2B_BENCH_DASHBOARDS", 5);
  const seconds = envInt("LOCALE2B_BENCH_DASHBOARD_SECONDS", 30);
  const cp = await startControlPlaneChild({ extraArgs: ["--warm-pool", "0"], timeoutMs: 60_000 });
  const browser = await chromium.launch({ executablePath: browserPath, headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage", "--no-proxy-server"] });
  try {
    heading(`dashboard: ${nSandboxes} running sandboxes, ${nDashboards} pages, ${seconds} s per CPU window (process runtime, Chromium ${browser.version()})`);
    for (let i = 0; i < nSandboxes; i += 10) await Promise.all(Array.from({ length: Math.min(10, nSandboxes - i) }, () => cp.createSandbox(3600)));

    const loads = [];
    for (let i = 0; i < 5; i++) {
      const l = await firstLoad(browser, cp, nSandboxes);
      await l.context.close();
      loads.push(l);
    }
    const bytes = median(loads.map((l) => l.bytes));
    const interactive = median(loads.map((l) => l.interactiveMs));
    const list = median(loads.map((l) => l.listMs));
    printTable(
      ["first load (empty cache, median of 5)", "value"],
      [
        ["bytes transferred until the sign-in form", `${(bytes / 1024).toFixed(1)} KiB`],
        ["navigation -> sign-in form takes input", fmtMs(interactive)],
        [`sign-in -> all ${nSandboxes} sandboxes listed`, fmtMs(list)],
      ],
    );

    printTable([`page from the top bar -> its data shown (${nSandboxes} sandboxes)`, "value"], await pageTimes(browser, cp, nSandboxes));

    const before = await cpuPercent(cp, seconds);
    const pages: BrowserContext[] = [];
    for (let i = 0; i < nDashboards; i++) {
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(`${cp.url}/dashboard/`);
      await signIn(page, cp, nSandboxes);
      pages.push(context);
      // The steady state is measured: every row's sparkline filled first (a history call per sandbox, a few at a time).
      await page.waitForFunction(
        () => {
          const rows = (globalThis as unknown as { document: { querySelectorAll(s: string): ArrayLike<{ querySelector(s: string): unknown }> } }).document.querySelectorAll("tr[data-sandbox-id]");
          return Array.from(rows).every((r) => r.querySelector("td.metric svg path"));
        },
        undefined,
        { timeout: 120_000 },
      );
    }
    const watching = await cpuPercent(cp, seconds);
    for (const c of pages) await c.close();
    const after = await cpuPercent(cp, seconds);
    const baseline = (before + after) / 2;
    const added = watching - baseline;
    printTable(
      ["server CPU (% of one core)", "value"],
      [
        ["no page open (before, after)", `${before.toFixed(1)}%, ${after.toFixed(1)}%`],
        [`${nDashboards} dashboards on the list`, `${watching.toFixed(1)}%`],
        ["added by the dashboards", `${added.toFixed(1)}% (${(added / nDashboards).toFixed(2)}% each)`],
      ],
    );
    return [
      { benchmark: "dashboard", metric: "first load, bytes transferred", value: `${(bytes / 1024).toFixed(1)} KiB`, goal: `<= ${GOAL_FIRST_LOAD_KIB} KiB`, ok: bytes <= GOAL_FIRST_LOAD_KIB * 1024 },
      { benchmark: "dashboard", metric: "first load, time to the sign-in form", value: fmtMs(interactive), goal: `<= ${GOAL_INTERACTIVE_MS} ms`, ok: interactive <= GOAL_INTERACTIVE_MS },
      {
        benchmark: "dashboard",
        metric: `server CPU added by ${nDashboards} dashboards on ${nSandboxes} sandboxes`,
        value: `${added.toFixed(1)}%`,
        goal: `<= ${GOAL_ADDED_CPU_PCT}% of a core`,
        ok: added <= GOAL_ADDED_CPU_PCT,
      },
    ].map((g) => (console.log(`  ${g.metric}: ${g.value} (goal ${g.goal}: ${verdict(g.ok)})`), g));
  } finally {
    await browser.close();
    await cp.stop();
  }
}
