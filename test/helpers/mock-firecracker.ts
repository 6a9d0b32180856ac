// A MOCK Firecracker. Firecracker cannot run on the project's machines (no
// binary, no hardware KVM), so the firecracker runtime's tests start this
// script AS the firecracker binary (LOCALE2B_FIRECRACKER points at a wrapper
// that firecracker-mock-bin.ts builds). It boots nothing. It:
//   - parses `--api-sock <path> --id <id>` like firecracker (anything else: exit 1);
//   - serves the API on that Unix socket and validates EVERY request (method,
//     path, JSON body) against ../shared/firecracker/firecracker-swagger.yaml
//     (firecracker-spec.ts), answering 400 {fault_message} like Firecracker;
//   - follows Firecracker's state machine loosely: pre-boot calls after
//     InstanceStart fail, /vm and /snapshot/create need a started VM,
//     /snapshot/create needs it paused, /snapshot/load needs a fresh process;
//     files it would open (kernel, disk, tap, memory file) must exist,
//     relative paths from its working directory like Firecracker's;
//   - on InstanceStart or a snapshot load, listens on the vsock uds_path and
//     answers `CONNECT 49983\n` with `OK <n>\n`, then proxies the bytes to the
//     envd the test started (MOCK_FIRECRACKER_ENVD): the control plane's path
//     to envd works end to end with a mocked VMM;
//   - appends one JSON line per request to MOCK_FIRECRACKER_LOG.
// Environment: MOCK_FIRECRACKER_SPEC (else found like the tests find it),
// MOCK_FIRECRACKER_LOG, MOCK_FIRECRACKER_ENVD (`host:port` or a Unix socket
// path), MOCK_FIRECRACKER_FAIL / MOCK_FIRECRACKER_HANG (comma-separated
// `METHOD /path` calls to answer with a 400 fault / never answer).
import { appendFileSync, closeSync, existsSync, fstatSync, ftruncateSync, openSync, readFileSync, statSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { dirname, resolve } from "node:path";
import { FirecrackerSpec, findFirecrackerSpec } from "./firecracker-spec.js";

const ENVD_PORT = 49983;
const VERSION = "1.17.0-mock";

function usage(msg: string): never {
  process.stderr.write(`error: ${msg}\n\nUSAGE: firecracker --api-sock <path> --id <id>\n`);
  process.exit(1);
}

const argv = process.argv.slice(2);
let apiSock = "/run/firecracker.socket";
let vmId = "anonymous-instance";
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]!;
  const value = () => argv[++i] ?? usage(`${a} needs a value`);
  if (a === "--api-sock") apiSock = value();
  else if (a === "--id") vmId = value();
  else usage(`Found argument '${a}' which wasn't expected (mock-firecracker knows --api-sock and --id)`);
}
if (!/^[a-zA-Z0-9-]{1,64}$/.test(vmId)) usage(`invalid --id '${vmId}'`);

const spec = new FirecrackerSpec(process.env.MOCK_FIRECRACKER_SPEC || findFirecrackerSpec());
const logFile = process.env.MOCK_FIRECRACKER_LOG;
const failing = new Set((process.env.MOCK_FIRECRACKER_FAIL ?? "").split(",").map((s) => s.trim()).filter(Boolean));
const hanging = new Set((process.env.MOCK_FIRECRACKER_HANG ?? "").split(",").map((s) => s.trim()).filter(Boolean));

/** Firecracker's log line format: `<local time> [<id>:<thread>] message`. */
function vmmLog(msg: string): void {
  const d = new Date();
  const local = new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().replace("Z", "000000");
  process.stdout.write(`${local} [${vmId}:main] ${msg}\n`);
}

type Phase = "fresh" | "configured" | "running" | "paused";
let phase: Phase = "fresh";
const config = {
  machine: { vcpu_count: 1, mem_size_mib: 128 } as Record<string, unknown>,
  boot: undefined as Record<string, unknown> | undefined,
  drives: new Map<string, Record<string, unknown>>(),
  vsock: undefined as { guest_cid: number; uds_path: string } | undefined,
  nets: new Map<string, Record<string, unknown>>(),
};
let seq = 0;
/** The memory file a snapshot was loaded from: Firecracker maps it (MAP_PRIVATE) for the VM's life. */
let mappedMemory: { fd: number; dev: number; ino: number } | undefined;

class Fault extends Error {}

// ---- vsock: hybrid-vsock on uds_path, proxied to the test's envd ----
const conns = new Set<net.Socket>();
let nextHostPort = 1 << 30;

function dialEnvd(): net.Socket | undefined {
  const target = process.env.MOCK_FIRECRACKER_ENVD;
  if (!target) return undefined;
  const m = /^(.*):(\d+)$/.exec(target);
  return m && !target.startsWith("/") ? net.createConnection(Number(m[2]), m[1]) : net.createConnection(target);
}

function serveVsock(udsPath: string): Promise<void> {
  const server = net.createServer((conn) => {
    conns.add(conn);
    conn.on("close", () => conns.delete(conn));
    conn.on("error", () => conn.destroy());
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const nl = buf.indexOf(10);
      if (nl < 0) {
        if (buf.length > 64) conn.destroy();
        return;
      }
      conn.off("data", onData);
      conn.pause();
      const m = /^CONNECT (\d+)$/.exec(buf.subarray(0, nl).toString("latin1").trim());
      const rest = buf.subarray(nl + 1);
      // Nothing listens on other guest ports: Firecracker then closes the connection.
      const upstream = m && Number(m[1]) === ENVD_PORT ? dialEnvd() : undefined;
      if (!upstream) {
        conn.destroy();
        return;
      }
      conns.add(upstream);
      upstream.on("close", () => {
        conns.delete(upstream);
        conn.destroy();
      });
      upstream.on("error", () => conn.destroy());
      conn.on("close", () => upstream.destroy());
      upstream.once("connect", () => {
        conn.write(`OK ${nextHostPort++}\n`);
        if (rest.length) upstream.write(rest);
        conn.pipe(upstream);
        upstream.pipe(conn);
        if (phase === "paused") {
          conn.pause();
          upstream.pause();
        }
      });
    };
    conn.on("data", onData);
  });

  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(udsPath, () => resolve());
  });
}

/** A paused guest runs nothing: no bytes move on vsock until it resumes. */
function setPaused(paused: boolean): void {
  phase = paused ? "paused" : "running";
  for (const c of conns) {
    if (paused) c.pause();
    else c.resume();
  }
}

function bootConsole(): void {
  const lines = [
    "Linux version 6.1.0-mock (mock-firecracker) #1 SMP",
    `Command line: ${String(config.boot?.boot_args ?? "")}`,
    "virtio_blk virtio0: [vda] mock disk",
    "Run /sbin/locale2b-init as init process",
  ];
  lines.forEach((l, i) => process.stdout.write(`[    0.${String(i * 12345).padStart(6, "0")}] ${l}\n`));
}

// ---- the API ----
function requireExists(path: unknown, what: string): void {
  if (typeof path !== "string" || !existsSync(path)) throw new Fault(`${what}: No such file or directory (os error 2): ${String(path)}`);
}

function preBoot(): void {
  if (phase === "running" || phase === "paused") throw new Fault("The requested operation is not supported after starting the microVM.");
}

async function handle(method: string, path: string, body: Record<string, unknown> | undefined): Promise<unknown> {
  if (method === "GET" && path === "/") {
    return { app_name: "Firecracker", id: vmId, state: phase === "running" ? "Running" : phase === "paused" ? "Paused" : "Not started", vmm_version: VERSION };
  }
  const b = body ?? {};
  if (method === "PUT" && path === "/machine-config") {
    preBoot();
    config.machine = b;
  } else if (method === "PUT" && path === "/boot-source") {
    preBoot();
    requireExists(b.kernel_image_path, "Failed to open the kernel image");
    config.boot = b;
  } else if (method === "PUT" && path.startsWith("/drives/")) {
    preBoot();
    requireExists(b.path_on_host, "Unable to create the block device: BackingFile");
    config.drives.set(String(b.drive_id), b);
  } else if (method === "PUT" && path === "/vsock") {
    preBoot();
    if (existsSync(String(b.uds_path))) throw new Fault(`Cannot create backend for vsock device: UnixBind(Os { code: 98, kind: AddrInUse, message: "Address in use" })`);
    config.vsock = b as typeof config.vsock;
  } else if (method === "PUT" && path.startsWith("/network-interfaces/")) {
    preBoot();
    if (!existsSync(`/sys/class/net/${String(b.host_dev_name)}`)) throw new Fault(`Could not create the network device: TapOpen(IoctlError(...)): no tap device ${String(b.host_dev_name)}`);
    config.nets.set(String(b.iface_id), b);
  } else if (method === "PUT" && (path === "/logger" || path === "/metrics")) {
    preBoot();
    return undefined; // does not count as configuring the VM (snapshot/load stays allowed)
  } else if (method === "PUT" && path === "/actions") {
    const action = b.action_type;
    if (action === "InstanceStart") {
      preBoot();
      if (!config.boot) throw new Fault("Cannot start microvm without kernel configuration.");
      if (config.vsock) await serveVsock(config.vsock.uds_path);
      phase = "running";
      vmmLog("Successfully started microvm that was configured from one single json");
      bootConsole();
    } else if (action === "SendCtrlAltDel") {
      if (phase !== "running") throw new Fault("The requested operation is not supported before starting the microVM.");
      setTimeout(() => process.exit(0), 20); // the guest reboots (reboot=k): Firecracker exits
    }
    return undefined;
  } else if (method === "PATCH" && path === "/vm") {
    if (phase === "fresh" || phase === "configured") throw new Fault("The requested operation is not supported before starting the microVM.");
    setPaused(b.state === "Paused");
    vmmLog(`The microVM is ${b.state === "Paused" ? "paused" : "resumed"}`);
    return undefined;
  } else if (method === "PUT" && path === "/snapshot/create") {
    if (phase === "fresh" || phase === "configured") throw new Fault("The requested operation is not supported before starting the microVM.");
    if (phase !== "paused") throw new Fault("Cannot save the microVM state: the microVM must be paused (PATCH /vm Paused) first");
    if (b.snapshot_type === "Diff") throw new Fault("Diff snapshots are not enabled (track_dirty_pages)");
    for (const p of [b.snapshot_path, b.mem_file_path]) requireExists(dirname(String(p)), "Cannot create the snapshot file");
    if (mappedMemory && existsSync(String(b.mem_file_path))) {
      const st = statSync(String(b.mem_file_path));
      if (st.dev === mappedMemory.dev && st.ino === mappedMemory.ino) {
        throw new Fault("mock-firecracker: mem_file_path is the memory file this VM was restored from and still maps: writing it would corrupt the guest's memory");
      }
    }
    writeFileSync(String(b.snapshot_path), JSON.stringify({ mock: "mock-firecracker-vmstate", id: vmId, machine: config.machine, drives: [...config.drives.values()], vsock: config.vsock, nets: [...config.nets.values()] }));
    const fd = openSync(String(b.mem_file_path), "w");
    ftruncateSync(fd, Number(config.machine.mem_size_mib) * 1024 * 1024); // sparse: the size of the guest's memory
    closeSync(fd);
    return undefined;
  } else if (method === "PUT" && path === "/snapshot/load") {
    if (phase !== "fresh") throw new Fault("Loading a microVM snapshot not allowed after configuring boot-specific resources.");
    requireExists(b.snapshot_path, "Cannot open the snapshot file");
    const state = JSON.parse(readFileSync(String(b.snapshot_path), "utf8")) as {
      mock?: string;
      machine: Record<string, unknown>;
      drives: Record<string, unknown>[];
      vsock?: { guest_cid: number; uds_path: string };
      nets: Record<string, unknown>[];
    };
    if (state.mock !== "mock-firecracker-vmstate") throw new Fault("Snapshot state file is invalid");
    const mem = (b.mem_backend as { backend_path?: string } | undefined)?.backend_path ?? b.mem_file_path;
    requireExists(mem, "Cannot open the memory file");
    const memFd = openSync(String(mem), "r");
    const memSt = fstatSync(memFd);
    mappedMemory = { fd: memFd, dev: memSt.dev, ino: memSt.ino };
    if (memSt.size !== Number((state.machine as { mem_size_mib?: number }).mem_size_mib) * 1024 * 1024) {
      throw new Fault("Cannot restore the guest memory: the memory file's size does not match the snapshot");
    }
    for (const d of state.drives) requireExists(d.path_on_host, "Unable to restore the block device: BackingFile");
    for (const o of (b.network_overrides as { iface_id: string; host_dev_name: string }[] | undefined) ?? []) {
      const n = state.nets.find((x) => x.iface_id === o.iface_id);
      if (!n) throw new Fault(`Invalid network override: the snapshot has no network interface '${o.iface_id}'`);
      n.host_dev_name = o.host_dev_name;
    }
    for (const n of state.nets) {
      if (!existsSync(`/sys/class/net/${String(n.host_dev_name)}`)) throw new Fault(`Cannot restore the network device: no tap device ${String(n.host_dev_name)}`);
    }
    Object.assign(config, { machine: state.machine, boot: {}, vsock: state.vsock });
    state.drives.forEach((d) => config.drives.set(String(d.drive_id), d));
    state.nets.forEach((n) => config.nets.set(String(n.iface_id), n));
    const uds = (b.vsock_override as { uds_path?: string } | undefined)?.uds_path ?? state.vsock?.uds_path;
    if (uds) {
      if (existsSync(uds)) throw new Fault(`Cannot restore the vsock device: UnixBind(Os { code: 98, kind: AddrInUse, message: "Address in use" })`);
      await serveVsock(uds);
    }
    for (const d of state.drives) vmmLog(`Restored block device ${String(d.drive_id)}: ${resolve(String(d.path_on_host))}`);
    if (uds) vmmLog(`Restored vsock: ${resolve(uds)}`);
    phase = b.resume_vm === true ? "running" : "paused";
    vmmLog(`Loaded the microVM snapshot ${String(b.snapshot_path)}${b.resume_vm ? " and resumed it" : ""}`);
    return undefined;
  } else {
    throw new Fault(`mock-firecracker does not implement ${method} ${path} (valid per the spec)`);
  }
  if (phase === "fresh") phase = "configured";
  return undefined;
}

function record(entry: Record<string, unknown>): void {
  if (logFile) appendFileSync(logFile, `${JSON.stringify({ seq: seq++, time: Date.now(), pid: process.pid, vmId, apiSock, ...entry })}\n`);
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const method = req.method ?? "GET";
    const path = (req.url ?? "/").split("?")[0]!;
    const text = Buffer.concat(chunks).toString("utf8");
    const reply = (status: number, payload?: unknown, extra: Record<string, unknown> = {}) => {
      const fault = status >= 400 ? (payload as { fault_message: string }).fault_message : undefined;
      record({ method, path, body: bodyJson, status, fault, ...extra });
      if (payload === undefined) res.writeHead(status).end();
      else res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(payload));
    };
    let bodyJson: unknown;
    try {
      bodyJson = text ? JSON.parse(text) : undefined;
    } catch (err) {
      reply(400, { fault_message: `SerdeJson(Error("${(err as Error).message}"))` }, { valid: false, validation: "invalid JSON" });
      return;
    }
    const v = spec.validate(method, path, bodyJson);
    if (!v.ok) {
      reply(400, { fault_message: v.error }, { valid: false, validation: v.error });
      return;
    }
    const ok = { valid: true, operationId: v.op.operationId, deprecated: v.deprecated };
    const call = `${method} ${path}`;
    if (hanging.has(call)) {
      record({ method, path, body: bodyJson, status: 0, hung: true, ...ok });
      return; // never answers
    }
    if (failing.has(call)) {
      reply(400, { fault_message: `mock-firecracker: injected fault for ${call} (MOCK_FIRECRACKER_FAIL)` }, ok);
      return;
    }
    handle(method, path, bodyJson as Record<string, unknown> | undefined).then(
      (out) => reply(out === undefined ? 204 : 200, out, ok),
      (err: Error) => reply(400, { fault_message: err instanceof Fault ? err.message : `mock-firecracker: ${err.message}` }, ok),
    );
  });
});

if (existsSync(apiSock)) {
  process.stderr.write(`Failed to open the API socket at: ${apiSock}. Error: Address in use\n`);
  process.exit(1);
}
server.listen(apiSock, () => vmmLog(`Running Firecracker v${VERSION} (mock, API spec ${spec.version})`));
process.on("SIGTERM", () => process.exit(0));
