// The real `e2b` JS SDK in a child process, driven over stdin/stdout (one JSON
// object per line each way), for tests that need it with its own process
// environment: NODE_EXTRA_CA_CERTS (a test CA, read by Node only at start),
// E2B_DOMAIN and E2B_API_KEY. Commands run concurrently; each answer carries
// the command's `id`. Ops:
//   create {template}            → {sandboxId, host8080: getHost(8080)}
//   run {cmd, user?, background?} → {exitCode, stdout, stderr} or {error}
//   stream {cmd}                 → {event: "stdout", data} for every chunk, then {exitCode, stdout}
//   fetch {port, path}           → {status, body}: GET https://<getHost(port)><path> with the global fetch
//   kill                         → {}
import readline from "node:readline";
import { Sandbox } from "e2b";

let sandbox;
const send = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

const ops = {
  async create({ template }) {
    sandbox = await Sandbox.create(template ?? "base", { timeoutMs: 600_000 });
    return { sandboxId: sandbox.sandboxId, host8080: sandbox.getHost(8080) };
  },
  async run({ cmd, user, background }) {
    if (background) {
      await sandbox.commands.run(cmd, { background: true, timeoutMs: 0, ...(user ? { user } : {}) });
      return {};
    }
    try {
      const r = await sandbox.commands.run(cmd, { timeoutMs: 120_000, ...(user ? { user } : {}) });
      return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
    } catch (err) {
      return { exitCode: err.exitCode ?? -1, stdout: err.stdout ?? "", stderr: err.stderr ?? "", error: err.message };
    }
  },
  async stream({ cmd }, id) {
    const r = await sandbox.commands.run(cmd, { timeoutMs: 0, onStdout: (data) => send({ id, event: "stdout", data }) });
    return { exitCode: r.exitCode, stdout: r.stdout };
  },
  async readFile({ path, user }) {
    try {
      return { content: await sandbox.files.read(path, user ? { user } : {}) };
    } catch (err) {
      return { error: err.message };
    }
  },
  async fetch({ port, path }) {
    const res = await fetch(`https://${sandbox.getHost(port)}${path}`);
    return { status: res.status, body: await res.text() };
  },
  async kill() {
    await sandbox?.kill();
    return {};
  },
};

for await (const line of readline.createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const cmd = JSON.parse(line);
  ops[cmd.op](cmd, cmd.id).then(
    (result) => send({ id: cmd.id, done: true, ...result }),
    (err) => send({ id: cmd.id, done: true, error: `${err.name}: ${err.message}${err.cause ? ` (cause: ${err.cause.code ?? err.cause.message})` : ""}` }),
  );
}
