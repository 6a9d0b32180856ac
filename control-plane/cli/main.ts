#!/usr/bin/env node
import "../../envd/polyfill/base64.js";
import { CliError, UsageError } from "./args.js";
import { runEnvdCommand } from "../../envd/command.js";
import { setting } from "../settings.js";

const HELP = `locale2b: self-hosted, E2B-compatible sandboxes

Usage: locale2b <command> [options]

Commands:
  serve     run the control plane: E2B REST API, Connect API and envd proxy
            on one port (npm start)
  api       a fleet's API replica (stateless; Postgres): docs/fleet.md
  node      a fleet's node: this host's sandboxes, behind the API replicas
  nodes     list, cordon and uncordon a fleet's nodes
  sandbox   create, list, exec in, pause, resume and kill sandboxes of a
            running server
  keys      create, list and revoke API keys
  audit     export the audit log (who did what to which sandbox) as JSON Lines
  backup    back up a data dir while its server runs (SQLite stores, snapshots)
  restore   restore a backup into a data dir no server holds
  envd      run envd (the in-sandbox agent) standalone on a TCP or Unix socket
  doctor    check this host for the microVM runtimes (QEMU, vsock, KVM, kernel)
  template  build guest images (root filesystems) from rootfs/templates/; list them
  help      show this help

Run 'locale2b <command> --help' for a command's options.

Quick start:
  locale2b serve                      # prints E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY
  export E2B_API_KEY=e2b_...          # the key it printed
  ID=$(locale2b sandbox create)
  locale2b sandbox exec "$ID" -- uname -a
  locale2b sandbox kill "$ID"
`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "envd":
      // Imported statically: runtimes start envd through this entry point, so it stays light.
      return runEnvdCommand(rest);
    case "serve": {
      const { runServeCommand } = await import("./serve-command.js");
      const code = await runServeCommand(rest);
      // Once closed, nothing left should keep the server alive (e.g. handles of adopted sandboxes).
      if (!rest.some((a) => a === "-h" || a === "--help")) process.exit(code);
      return code;
    }
    case "node": {
      const { runServeCommand } = await import("./serve-command.js");
      const code = await runServeCommand(rest, "node");
      if (!rest.some((a) => a === "-h" || a === "--help")) process.exit(code);
      return code;
    }
    case "api": {
      const code = await (await import("./fleet-command.js")).runApiCommand(rest);
      if (!rest.some((a) => a === "-h" || a === "--help")) process.exit(code);
      return code;
    }
    case "nodes":
      return (await import("./fleet-command.js")).runNodesCommand(rest);
    case "sandbox":
    case "sandboxes": {
      const code = await (await import("./sandbox-command.js")).runSandboxCommand(rest);
      // Done: an idle connection must not keep the CLI waiting (stdout/stderr writes are synchronous here).
      process.exit(code);
    }
    case "keys":
    case "key":
      return (await import("./keys-command.js")).runKeysCommand(rest);
    case "audit":
      return (await import("./audit-command.js")).runAuditCommand(rest);
    case "backup":
      return (await import("./backup-command.js")).runBackupCommand(rest);
    case "restore":
      return (await import("./restore-command.js")).runRestoreCommand(rest);
    case "doctor":
      return (await import("./doctor-command.js")).runDoctorCommand(rest);
    case "template":
    case "templates":
      return (await import("./template-command.js")).runTemplateCommand(rest);
    case undefined:
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(HELP);
      return 0;
    default:
      process.stderr.write(`locale2b: unknown command '${command}'\n\n${HELP}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError) {
      const help = err.command ? `locale2b ${err.command.split(" ")[0]} --help` : "locale2b --help";
      process.stderr.write(`locale2b${err.command ? ` ${err.command}` : ""}: ${err.message}\nRun '${help}' for usage.\n`);
      process.exit(2);
    }
    process.stderr.write(`locale2b: ${err instanceof Error ? err.message : String(err)}\n`);
    if (!(err instanceof CliError) && setting("LOCALE2B_DEBUG") && err instanceof Error) process.stderr.write(`${err.stack}\n`);
    // Exit now: a failed start may leave handles (sockets, timers) that would keep the process alive.
    process.exit(err instanceof CliError ? err.exitCode : 1);
  },
);
