// The `base` template's root filesystem, as built by the image pipeline,
// under the process runtime: the image's own init (process mode, serving the
// hybrid-vsock handshake), its Node and its envd bundle, on a per-sandbox
// overlay, with no VM. The same E2B SDK suite as every runtime, plus what
// shows that the sandbox really is the image and not the host.
import { describe, expect, it } from "vitest";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane } from "../helpers/control-plane.js";
import { defineEnvdSuite, suite } from "../helpers/sdk-envd-suite.js";
import { testImagesDir } from "../helpers/vm.js";

const dir = testImagesDir();
const image = findTemplateImage("base", dir);
const missing =
  process.getuid?.() !== 0
    ? "template roots need root (overlay mounts, pivot_root)"
    : !image
      ? `the base template is not built in ${dir} (locale2b template build base; npm test builds it when it can)`
      : undefined;

const why = missing ? ` [skipped: ${missing}; it runs as root once the base template is built (npm test builds it when QEMU is installed)]` : "";

describe.skipIf(missing !== undefined)(`process runtime on the base template${why}`, () => {
  defineEnvdSuite({ start: () => startTestControlPlane({ runtime: new ProcessRuntime({ imagesDir: dir }) }) });

  describe("process runtime on the base template: the image, not the host", () => {
    it("runs the image's init as pid 1, its Node and its Debian userland", async () => {
      const sbx = suite.sandbox!;
      const r = await sbx.commands.run("cat /proc/1/cmdline | tr '\\0' ' '; echo; node --version; . /etc/os-release; echo $VERSION_CODENAME; id -u", { user: "root" });
      const [init, node, codename, uid] = r.stdout.trim().split("\n");
      expect(init).toMatch(/^\/sbin\/locale2b-init /);
      expect(node).toBe(process.version);
      expect(codename).toBe("bookworm");
      expect(uid).toBe("0");
      expect((await sbx.commands.run("id -u; python3 -c 'print(6*7)'; git --version | cut -d' ' -f1")).stdout).toBe("1000\n42\ngit\n");
    });

    it("writes go to the sandbox's overlay: the template image is never changed", async () => {
      const sbx = suite.sandbox!;
      await sbx.commands.run("echo changed > /etc/locale2b-overlay-test && rm -f /usr/bin/xargs", { user: "root" });
      expect(await sbx.files.read("/etc/locale2b-overlay-test")).toBe("changed\n");
      const { existsSync } = await import("node:fs");
      expect(existsSync(`${image!.rootfsDir}/etc/locale2b-overlay-test`)).toBe(false);
      expect(existsSync(`${image!.rootfsDir}/usr/bin/xargs`)).toBe(true);
    });
  });
});
