// Egress by host name on a real QEMU microVM: a VM with an egress policy has
// a tap on the same nft path as the process runtime's veth, so the same
// egress proxy serves it (helpers/egress-names-suite.ts).
import { describe } from "vitest";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import { tapUnsupported } from "../../control-plane/runtimes/qemu/tap.js";
import { egressNamesSuite } from "../helpers/egress-names-suite.js";
import { qemuMissing, testImagesDir } from "../helpers/vm.js";

const missing = qemuMissing() ?? tapUnsupported();

describe.skipIf(missing !== undefined)(`egress by host name on a qemu microVM${missing ? ` [skipped: ${missing}]` : ""}`, () => {
  egressNamesSuite({ runtime: () => new QemuRuntime({ imagesDir: testImagesDir() }), imagesDir: testImagesDir(), timeoutMs: 600_000 });
});
