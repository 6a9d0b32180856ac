// The workspace API on a template root filesystem (the Debian image, under
// the process runtime): /workspace is made in the sandbox's own root, with
// no host path involved, and exec, files and sessions work there as on the
// host's filesystem.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { testImagesDir } from "../helpers/vm.js";
import { workspaceClient } from "../helpers/workspace.js";

const dir = testImagesDir();
const missing =
  process.getuid?.() !== 0
    ? "template roots need root (overlay mounts, pivot_root)"
    : !findTemplateImage("base", dir)
      ? `the base template is not built in ${dir} (locale2b template build base; npm test builds it when it can)`
      : undefined;

describe.skipIf(missing !== undefined)(`the workspace API on the base template${missing ? ` [skipped: ${missing}]` : ""}`, () => {
  let cp: TestControlPlane;
  let call: ReturnType<typeof workspaceClient>;
  beforeAll(async () => {
    cp = await startTestControlPlane({ runtime: new ProcessRuntime({ imagesDir: dir }) });
    call = workspaceClient(cp.workspaceUrl, cp.apiKey);
  });
  afterAll(async () => {
    await cp?.close();
  });

  it("makes /workspace in the image's own root, owned by user, and runs there", async () => {
    const sb = await call("POST", "/sandboxes", { workspace_id: "tmpl" });
    expect(sb.status).toBe(201);
    const id = sb.body.sandbox_id as string;
    const r = await call("POST", `/sandboxes/${id}/exec`, {
      command: ". /etc/os-release; echo $VERSION_CODENAME; pwd; stat -c '%U %a' /workspace; findmnt -n /workspace || echo own-root",
    });
    expect(r.body.stdout).toBe("bookworm\n/workspace\nuser 755\nown-root\n");
    expect((await call("POST", `/sandboxes/${id}/files/write`, { path: "a/b.txt", content: "x" })).body).toMatchObject({ path: "/workspace/a/b.txt" });
    const s = await call("POST", `/sandboxes/${id}/exec/start`, { command: "echo from-session" });
    let out = "";
    while (!out.includes("from-session")) out += (await call("GET", `/sandboxes/${id}/exec/${s.body.session_id}/output?wait_ms=1000`)).body.output;
  });
});
