#!/usr/bin/env node
// The envd bundle's entry (GUEST.envd, /opt/locale2b/envd/envd.js in every
// guest image): runs envd exactly as `locale2b envd` does, without the rest
// of the CLI. control-plane/images/envd-bundle.ts bundles it.
import "./polyfill/base64.js";
import { runEnvdCommand } from "./command.js";

runEnvdCommand(process.argv.slice(2)).then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (err: unknown) => {
    const code = (err as { code?: unknown }).code;
    const usage = typeof code === "string" && code.startsWith("ERR_PARSE_ARGS");
    process.stderr.write(`envd: ${err instanceof Error ? err.message : String(err)}\n${usage ? "Run 'envd --help' for usage.\n" : ""}`);
    process.exit(usage ? 2 : 1);
  },
);
