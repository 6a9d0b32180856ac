// The template API under bad input and abuse, over plain REST against a real
// control plane (process runtime, real builds): files never uploaded,
// forged, expired and replayed upload URLs, an oversize upload, a template of
// 10,000 steps, bad names, two builds of one template at once, unknown ids,
// malformed bodies, a build that fills its disk, and a build stopped by
// deleting its template. Each gets a clear error, nothing is left behind, and
// the server stays healthy. Needs root.
import { createHash, createHmac } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { TemplateFiles } from "../../control-plane/templates/uploads.js";
import { imagesDir } from "../../control-plane/images/layout.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;

let cp: TestControlPlane;
let n = 0;
const unique = (what: string) => `${what}-${process.pid}-${n++}`;

beforeAll(async () => {
  if (skip) return;
  // A small upload limit and build disk, so the oversize and full-disk cases are quick.
  const restore = setEnv({ LOCALE2B_TEMPLATE_UPLOAD_MAX_MB: "1", LOCALE2B_TEMPLATE_BUILD_DISK_MB: "300" });
  cp = await startTestControlPlane({ runtime }).finally(restore);
}, 120_000);

afterAll(async () => {
  await cp?.close();
});

async function api(method: string, path: string, body?: unknown, raw?: string): Promise<{ status: number; json: { message?: string; [k: string]: unknown } }> {
  const res = await fetch(`${cp.url}${path}`, {
    method,
    headers: { "x-api-key": cp.apiKey, "content-type": "application/json" },
    ...(raw !== undefined ? { body: raw } : body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: res.headers.get("content-type")?.includes("json") ? JSON.parse(text) : { text } };
}

async function requestBuild(name: string): Promise<{ templateID: string; buildID: string }> {
  const r = await api("POST", "/v3/templates", { name });
  expect(r.status, r.json.message).toBe(202);
  return r.json as unknown as { templateID: string; buildID: string };
}

async function waitBuild(templateID: string, buildID: string): Promise<{ status: string; reason?: { message: string; step?: string } }> {
  for (;;) {
    const r = await api("GET", `/templates/${templateID}/builds/${buildID}/status`);
    const s = r.json as unknown as { status: string; reason?: { message: string; step?: string } };
    if (s.status === "ready" || s.status === "error") return s;
    await new Promise((res) => setTimeout(res, 200));
  }
}

const buildDirs = () => (existsSync(join(cp.dataDir, "template-builds")) ? readdirSync(join(cp.dataDir, "template-builds")).filter((f) => !f.endsWith(".jsonl")) : []);
const uploads = () => (existsSync(join(cp.dataDir, "template-files")) ? readdirSync(join(cp.dataDir, "template-files")) : []);

describe.skipIf(skip !== undefined)(`the template API under bad input${skip ? ` (skipped: ${skip})` : ""}`, { timeout: 300_000 }, () => {
  it("refuses bad names, unknown templates and builds, malformed bodies, a 10,000-step template and steps it cannot run, naming what is wrong", async () => {
    for (const name of ["../etc", "a\u0000b", "UPPER", "", "x:bad tag", "other/name", "a".repeat(200)]) {
      const r = await api("POST", "/v3/templates", { name });
      expect(r.status, name).toBe(400);
      expect(r.json.message).toMatch(/invalid template name|field 'name' is required|invalid tag/);
    }
    expect((await api("POST", "/v3/templates", { name: "base" })).json.message).toMatch(/built on the server from rootfs\/templates\/base\.yaml/);
    expect((await api("POST", "/v3/templates", undefined, "{not json")).status).toBe(400);
    expect((await api("GET", "/templates/nosuchtemplate-x")).status).toBe(404);
    const { templateID, buildID } = await requestBuild(unique("bad"));
    expect((await api("GET", `/templates/${templateID}/builds/00000000-0000-4000-8000-000000000000/status`)).status).toBe(404);
    const start = (body: unknown) => api("POST", `/v2/templates/${templateID}/builds/${buildID}`, body);
    const cases: [unknown, RegExp][] = [
      [{ steps: Array.from({ length: 10_000 }, () => ({ type: "RUN", args: ["true"] })) }, /10000 steps: at most 500/],
      [{ steps: [{ type: "FROBNICATE", args: [] }] }, /unknown step type 'FROBNICATE'/],
      [{ steps: [{ type: "COPY", args: ["app/", "/app"], filesHash: "a".repeat(64) }] }, /step 1 \(COPY\): the files of 'app\/'.*were never uploaded/],
      [{ steps: [{ type: "COPY", args: ["/etc/passwd", "/app"], filesHash: "a".repeat(64) }] }, /the source '\/etc\/passwd' is absolute/],
      [{ steps: [{ type: "COPY", args: ["../up", "/app"], filesHash: "a".repeat(64) }] }, /leaves the template's files/],
      [{ steps: [{ type: "ENV", args: ["1BAD", "x"] }] }, /invalid variable name '1BAD'/],
      [{ steps: [{ type: "USER", args: ["Root Evil"] }] }, /user name/],
      [{ steps: [{ type: "RUN", args: ["a\u0000b"] }] }, /contains a NUL character/],
      [{ fromImage: "debian", fromTemplate: "base" }, /fromImage or fromTemplate, not both/],
      [{ fromTemplate: "nosuchbase-x" }, /base template 'nosuchbase-x' not found/],
      [{ fromImage: "debian", fromImageRegistry: { type: "ftp" } }, /fromImageRegistry.type must be registry, aws or gcp/],
      [{ steps: "RUN true" }, /steps must be an array/],
    ];
    for (const [body, message] of cases) {
      const r = await start(body);
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(r.json.message).toMatch(message);
    }
    // None of those started it: a good spec still does.
    expect((await start({ fromTemplate: "base", steps: [{ type: "RUN", args: ["true"] }] })).status).toBe(202);
    expect((await waitBuild(templateID, buildID)).status).toBe("ready");
    expect((await start({ steps: [] })).status).toBe(409);
    expect((await api("GET", "/health")).status).toBe(200);
  });

  it("upload URLs: a forged, unsigned or replayed (another template, another hash) URL is refused; an expired one too; an oversize upload leaves nothing", async () => {
    const a = await requestBuild(unique("files-a"));
    const b = await requestBuild(unique("files-b"));
    const body = Buffer.from("not really a tar");
    const hash = createHash("sha256").update(body).digest("hex");
    const link = (await api("GET", `/templates/${a.templateID}/files/${hash}`)).json as { present: boolean; url: string };
    expect(link.present).toBe(false);
    const url = new URL(link.url);
    const put = (u: string, data: Buffer = body) => fetch(u, { method: "PUT", body: data, headers: { "content-length": String(data.length) } });
    // No API key is needed: the signature is the authentication. Tampered ones are refused.
    const forged = new URL(url);
    forged.searchParams.set("signature", url.searchParams.get("signature")!.replace(/.$/, (c) => (c === "0" ? "1" : "0")));
    const unsigned = new URL(url);
    unsigned.search = "";
    const otherTemplate = new URL(url.href.replace(a.templateID, b.templateID));
    const otherHash = new URL(url.href.replace(hash, "b".repeat(64)));
    const later = new URL(url);
    later.searchParams.set("expires", String(Number(url.searchParams.get("expires")) + 3600));
    for (const [what, u, status, message] of [
      ["forged", forged, 403, /invalid upload signature/],
      ["unsigned", unsigned, 403, /not signed/],
      ["another template", otherTemplate, 403, /invalid upload signature/],
      ["another hash", otherHash, 403, /invalid upload signature/],
      ["a later expiry", later, 403, /invalid upload signature/],
    ] as const) {
      const r = await put(u.href);
      expect(r.status, what).toBe(status);
      expect(((await r.json()) as { message: string }).message, what).toMatch(message);
    }
    expect(uploads()).not.toContain(hash);
    // An expired URL: made with the server's own key (the test reads it as the server derives it) an hour ago.
    const seed = Buffer.from((await cp.store.getSetting("token_seed"))!, "hex");
    const files = new TemplateFiles("/nonexistent", createHmac("sha256", seed).update("template-files").digest(), { ttlSeconds: 60, maxBytes: 1 });
    const expired = files.uploadUrl(cp.url, a.templateID, hash, Date.now() - 3600_000);
    const er = await put(expired);
    expect(er.status).toBe(403);
    expect(((await er.json()) as { message: string }).message).toMatch(/expired/);
    // The real one works, once; the files are then present.
    expect((await put(url.href)).status).toBe(200);
    expect(uploads()).toContain(hash);
    expect(((await api("GET", `/templates/${a.templateID}/files/${hash}`)).json as { present: boolean }).present).toBe(true);
    // Over this server's limit (1 MiB): 413, and no partial file stays.
    const big = Buffer.alloc(2 * 1024 * 1024, 7);
    const bigHash = createHash("sha256").update(big).digest("hex");
    const bigLink = (await api("GET", `/templates/${a.templateID}/files/${bigHash}`)).json as { url: string };
    const r = await put(bigLink.url, big);
    expect(r.status).toBe(413);
    expect(((await r.json()) as { message: string }).message).toMatch(/over the limit of 1048576 bytes.*LOCALE2B_TEMPLATE_UPLOAD_MAX_MB/);
    expect(uploads().filter((f) => f.includes(bigHash))).toEqual([]);
    expect(uploads().filter((f) => f.startsWith(".tmp"))).toEqual([]);
  });

  it("two builds of one template at once: the second request is refused while the first runs", async () => {
    const name = unique("twice");
    const first = await requestBuild(name);
    expect((await api("POST", `/v2/templates/${first.templateID}/builds/${first.buildID}`, { fromTemplate: "base", steps: [{ type: "RUN", args: [`sleep 3 # ${name}`] }] })).status).toBe(202);
    const second = await api("POST", "/v3/templates", { name });
    expect(second.status).toBe(409);
    expect(second.json.message).toMatch(/has a build under way/);
    expect((await waitBuild(first.templateID, first.buildID)).status).toBe("ready");
    // Once it is done, a new build of the template is welcome.
    expect((await api("POST", "/v3/templates", { name })).status).toBe(202);
  });

  it("a build that fills its disk fails with the step and ENOSPC; nothing of it stays and the server is healthy", async () => {
    const { templateID, buildID } = await requestBuild(unique("full"));
    const before = buildDirs();
    expect((await api("POST", `/v2/templates/${templateID}/builds/${buildID}`, { fromTemplate: "base", steps: [{ type: "RUN", args: ["echo ok"] }, { type: "RUN", args: ["dd if=/dev/zero of=/home/user/big bs=1M count=400"] }] })).status).toBe(202);
    const s = await waitBuild(templateID, buildID);
    expect(s.status).toBe("error");
    expect(s.reason?.step).toBe("2");
    expect(s.reason?.message).toMatch(/No space left on device/);
    expect(buildDirs()).toEqual(before);
    expect(existsSync(join(imagesDir(), "templates", `@${buildID}.current`))).toBe(false);
    expect((await api("GET", "/health")).status).toBe(200);
  });

  it("deleting a template stops its running build", async () => {
    const name = unique("stopped");
    const { templateID, buildID } = await requestBuild(name);
    expect((await api("POST", `/v2/templates/${templateID}/builds/${buildID}`, { fromTemplate: "base", steps: [{ type: "RUN", args: ["sleep 600"] }] })).status).toBe(202);
    for (;;) {
      const st = (await api("GET", `/templates/${templateID}/builds/${buildID}/status`)).json as { logEntries: { message: string }[]; status: string };
      if (st.status === "building" && st.logEntries.some((e) => e.message.startsWith("RUN sleep 600"))) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect((await api("DELETE", `/templates/${name}`)).status).toBe(204);
    expect((await api("GET", `/templates/${name}`)).status).toBe(404);
    // Its sandbox is gone with it (no build folder stays).
    for (let i = 0; i < 100 && buildDirs().includes(buildID); i++) await new Promise((r) => setTimeout(r, 100));
    expect(buildDirs()).not.toContain(buildID);
  });
});
