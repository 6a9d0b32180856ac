import { existsSync, mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { defaultAssetsDir } from "../../control-plane/api/dashboard/assets.js";
import { findExecutable } from "../../control-plane/host/executables.js";

// What the dashboard's browser suites share: Debian's `chromium` driven by playwright-core (no browser
// download; scripts/setup-browser.sh installs it, LOCALE2B_CHROMIUM names another), why they skip, where
// their screenshots go ($LOCALE2B_TEST_ARTIFACTS/dashboard-<random>, else the temp dir), and signing in.

export const browserPath = findExecutable("chromium", process.env.LOCALE2B_CHROMIUM) ?? findExecutable("chromium-browser");

/** Why the browser suites cannot run here, or undefined. */
export const browserSkip = !browserPath
  ? "no Chromium: install Debian's (apt-get install chromium) or set LOCALE2B_CHROMIUM to a Chromium binary"
  : !existsSync(join(defaultAssetsDir(), "index.html"))
    ? "the dashboard is not built: npm run build"
    : undefined;

/** The page's globals the functions run in the browser use (this project's type check has no DOM library). */
export interface Win {
  document: { querySelector(s: string): { innerText: string; getAttribute(name: string): string | null } | null; cookie: string };
  localStorage: Record<string, string>;
  sessionStorage: Record<string, string>;
  location: { href: string };
}

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({ executablePath: browserPath!, headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage", "--no-proxy-server"] });
}

/** A new folder for this run's screenshots (CI keeps $LOCALE2B_TEST_ARTIFACTS); its path is printed. */
export function screenshotsDir(): string {
  const base = process.env.LOCALE2B_TEST_ARTIFACTS ?? tmpdir();
  mkdirSync(base, { recursive: true });
  const dir = mkdtempSync(join(base, "dashboard-"));
  console.log(`dashboard screenshots (CI artefacts): ${dir}`);
  return dir;
}

/** Signs in through the form; resolves on the sandbox list. */
export async function signIn(context: BrowserContext, url: string, apiKey: string): Promise<Page> {
  const page = await context.newPage();
  await page.goto(`${url}/dashboard/`);
  await page.locator("input[name=api_key]").fill(apiKey);
  await page.locator("button[type=submit]").click();
  await page.locator("table[data-testid=sandboxes]").waitFor();
  return page;
}

/**
 * Collects the page's script errors, Content-Security-Policy refusals and
 * dialogs (alert/confirm a test did not expect) from now on. A 401 the page
 * expects (GET /dashboard/session before sign-in) is logged by Chromium as a
 * failed load: not counted.
 */
export function watchProblems(page: Page): string[] {
  const problems: string[] = [];
  page.on("pageerror", (err) => problems.push(`pageerror: ${err.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push(`console: ${m.text()}`);
  });
  return problems;
}
