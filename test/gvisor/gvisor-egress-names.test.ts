// Egress by host name on the gvisor runtime: its sandboxes' veth is on the
// same nft path as the process runtime's, so the same egress proxy serves
// them (helpers/egress-names-suite.ts).
import { describe } from "vitest";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { egressNamesSuite } from "../helpers/egress-names-suite.js";
import { testImagesDir } from "../helpers/vm.js";

const missing = gvisorMissing();

describe.skipIf(missing !== undefined)(`gvisor: egress by host name${missing ? ` [skipped: ${missing}]` : ""}`, () => {
  egressNamesSuite({ runtime: gvisorRuntime, imagesDir: testImagesDir(), timeoutMs: 300_000 });
});
