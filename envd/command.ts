import { parseArgs } from "node:util";
import { startEnvd } from "./main.js";
import { ENVD_PORT, ENVD_VERSION } from "./version.js";
import { installEnvdHeaders } from "./polyfill/headers.js";

const HELP = `Usage: locale2b envd [options]

Runs envd, the in-sandbox agent: process.Process and filesystem.Filesystem
(Connect JSON/binary, gRPC, gRPC-web over HTTP/1.1 and h2c on one socket,
with gRPC reflection) and the HTTP endpoints /health, /files, /init, /envs,
/metrics. Run as root it serves processes as other users.

Options:
  --listen URL         tcp://HOST:PORT, unix:///PATH or unix+vsock:///PATH
                       (hybrid-vsock handshake, as VM runtimes use); repeatable
                       (default tcp://127.0.0.1:${ENVD_PORT})
  --user NAME          default user (default: 'user' when it exists and envd
                       runs as root, else envd's own user)
  --workdir DIR        default working directory (default: the user's home)
  --access-token TOK   require X-Access-Token (default: none until POST /init)
  -h, --help           show this help

Try it with the E2B SDK in debug mode:
  E2B_DEBUG=true E2B_SANDBOX_URL=http://127.0.0.1:${ENVD_PORT} node my-agent.js

envd version ${ENVD_VERSION} (the E2B envd version whose features it implements)
`;

export async function runEnvdCommand(args: string[]): Promise<number> {
  installEnvdHeaders(); // envd is this process: its own Headers, not undici's (polyfill/headers.ts)
  const { values } = parseArgs({
    args,
    options: {
      listen: { type: "string", multiple: true },
      user: { type: "string" },
      workdir: { type: "string" },
      "access-token": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const envd = await startEnvd({
    listen: values.listen?.length ? values.listen : [`tcp://127.0.0.1:${ENVD_PORT}`],
    defaultUser: values.user,
    defaultWorkdir: values.workdir,
    accessToken: values["access-token"] ?? (process.env.LOCALE2B_ENVD_ACCESS_TOKEN || undefined),
  });
  const stop = () => {
    void envd.close().then(() => process.exit(0));
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  return new Promise<number>(() => undefined); // runs until signalled
}
