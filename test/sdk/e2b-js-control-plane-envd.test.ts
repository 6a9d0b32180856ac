// The real `e2b` JS SDK against a real control plane on the process runtime
// (startTestControlPlane): commands, PTY and files of one sandbox, all through
// the control plane's envd proxy. The suite itself is shared with the microVM
// runtimes: test/helpers/sdk-envd-suite.ts. The lifecycle is in
// e2b-js-control-plane.test.ts.
import { startTestControlPlane } from "../helpers/control-plane.js";
import { defineEnvdSuite } from "../helpers/sdk-envd-suite.js";

defineEnvdSuite({ start: () => startTestControlPlane() });
