// The sandbox a build runs its steps in: a real sandbox of the server's
// runtime (started on the base image, or on a cached step's files), driven
// through its envd like any other, but never in the sandbox list: it is the
// build's, and goes with it.
import { randomBytes } from "node:crypto";
import { createReadStream, mkdirSync, rmSync, statSync } from "node:fs";
import type { Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Logger } from "pino";
import { Process } from "../../gen/ts/process/process_pb.js";
import type { SnapshotSource } from "../domain/snapshot.js";
import type { Instance, Runtime } from "../runtimes/runtime.js";
import { EnvdClient } from "../transport/envd-client.js";
import { envdErrorMessage, envdFilesRequest, readSmall } from "../transport/envd-files.js";
import { EnvdRpc, type EnvdTarget } from "../transport/envd-rpc.js";
import { LocalEndpoint } from "../transport/local-endpoint.js";
import { envdCrashLoop } from "./envd-crash-loop.js";

export interface BuildSandboxSpec {
  runtime: Runtime;
  /** The image it boots (a key of the image cache). */
  image: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  /** Its own directory (removed when it is killed). */
  dir: string;
  /** Start on these files instead of fresh ones (a cached step). */
  from?: SnapshotSource;
  log: Logger;
}

export interface RunOptions {
  user: string;
  cwd?: string;
  envs?: Record<string, string>;
  /** Each line of output as it comes (stdout and stderr). */
  onLine?: (line: string, stream: "stdout" | "stderr") => void;
  /** Stdout's bytes, untouched, instead of lines (an export's tar stream). */
  stdout?: Writable;
  /** The script's positional parameters ($1…): values never spliced into the script. */
  args?: string[];
  signal: AbortSignal;
}

/** envd exits each time the init starts it (envd-crash-loop.ts). */
class EnvdCrashLoop extends Error {}

/** How much of a command's output a failure quotes. */
const TAIL_LINES = 20;

export class BuildSandbox {
  readonly target: EnvdTarget;
  private readonly rpc = new EnvdRpc();

  private constructor(
    readonly id: string,
    readonly inst: Instance,
    private readonly endpoint: LocalEndpoint,
    token: string,
    private readonly dir: string,
  ) {
    this.target = { endpoint, token };
  }

  /** Starts it and waits for its envd; a sandbox that does not come up is killed and its directory removed. */
  static async start(s: BuildSandboxSpec): Promise<BuildSandbox> {
    const id = `b${randomBytes(10).toString("hex")}`;
    mkdirSync(s.dir, { recursive: true, mode: 0o700 });
    const spec = { sandboxId: id, templateId: s.image, cpuCount: s.cpuCount, memoryMB: s.memoryMB, diskSizeMB: s.diskSizeMB, dir: s.dir, allowInternetAccess: true, log: s.log };
    let inst: Instance | undefined;
    let endpoint: LocalEndpoint | undefined;
    try {
      inst = await (s.from ? s.runtime.createFromSnapshot(spec, s.from) : s.runtime.create(spec));
      endpoint = new LocalEndpoint(id, inst.socketPath, inst.pauseConnections);
      const envd = new EnvdClient();
      const started = inst;
      let looked = 0;
      // An envd that keeps exiting is restarted by the init, so the sandbox looks alive: its console says otherwise.
      const alive = async () => {
        if (Date.now() - looked >= 500) {
          looked = Date.now();
          const loop = envdCrashLoop((await started.logs().catch(() => [])).map((l) => l.line));
          if (loop) throw new EnvdCrashLoop(loop);
        }
        return started.alive();
      };
      await envd.waitReady(endpoint, Math.max(60_000, inst.readyTimeoutMs ?? 0), alive, () => inst!.vsockReady?.() ?? true);
      const token = randomBytes(24).toString("hex");
      const res = await envd.request(endpoint, { method: "POST", path: "/init", body: { accessToken: token, timestamp: new Date().toISOString() } });
      if (res.status !== 204) throw new Error(`envd /init answered ${res.status}: ${res.body.toString().slice(0, 200)}`);
      return new BuildSandbox(id, inst, endpoint, token, s.dir);
    } catch (err) {
      const console = (await inst?.logs().catch(() => []))?.slice(-5).map((l) => l.line) ?? [];
      endpoint?.close();
      await inst?.kill().catch(() => undefined);
      rmSync(s.dir, { recursive: true, force: true });
      // The crash loop's reason already quotes the console.
      const tail = console.length && !(err instanceof EnvdCrashLoop) ? ` (last console lines: ${console.join(" | ")})` : "";
      throw new Error(`the build sandbox did not start: ${(err as Error).message}${tail}`);
    }
  }

  /**
   * Runs `<shell> -c command` as `user` (with `o.args` as $1…); its output as lines
   * (or stdout's bytes to `o.stdout`). Resolves with the exit code and the
   * last lines of output; rejects only when the command could not run.
   */
  async run(command: string, o: RunOptions, shell = "/bin/sh"): Promise<{ exitCode: number; tail: string[] }> {
    const client = this.rpc.client(Process, this.target, o.user);
    const tail: string[] = [];
    const partial = { stdout: "", stderr: "" };
    const decoder = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    const emit = (stream: "stdout" | "stderr", text: string, flush = false) => {
      const lines = (partial[stream] + text).split("\n");
      partial[stream] = flush ? "" : lines.pop()!;
      for (const line of lines) {
        if (flush && line === "") continue;
        const clean = line.replace(/\r$/, "");
        tail.push(clean);
        if (tail.length > TAIL_LINES) tail.shift();
        o.onLine?.(clean, stream);
      }
    };
    let exitCode = -1;
    const stdout = o.stdout;
    for await (const res of client.start(
      { process: { cmd: shell, args: ["-c", command, ...(o.args ? ["locale2b-build", ...o.args] : [])], envs: o.envs ?? {}, ...(o.cwd ? { cwd: o.cwd } : {}) }, stdin: false },
      { signal: o.signal },
    )) {
      const e = res.event?.event;
      if (e?.case === "data") {
        const out = e.value.output;
        if (out.case === "stdout") {
          if (stdout) {
            if (!stdout.write(out.value)) await new Promise<void>((r) => stdout.once("drain", r));
          } else emit("stdout", decoder.stdout.decode(out.value, { stream: true }));
        } else if (out.case === "stderr") emit("stderr", decoder.stderr.decode(out.value, { stream: true }));
      } else if (e?.case === "end") {
        exitCode = e.value.exitCode;
      }
    }
    if (!stdout) emit("stdout", "", true);
    emit("stderr", "", true);
    return { exitCode, tail };
  }

  /** Uploads a host file to `guestPath` as root, streamed. */
  async upload(file: string, guestPath: string): Promise<void> {
    const req = envdFilesRequest(this.target, { method: "POST", path: guestPath, username: "root", headers: { "content-length": String(statSync(file).size) } });
    const answered = new Promise<void>((resolve, reject) => {
      req.once("response", (res) => {
        if (res.statusCode === 200) {
          res.resume();
          resolve();
        } else void readSmall(res).then((t) => reject(new Error(`uploading to ${guestPath} failed: ${res.statusCode} ${envdErrorMessage(t)}`)));
      });
      req.once("error", reject);
    });
    await pipeline(createReadStream(file), req);
    await answered;
  }

  /** A filesystem snapshot of the sandbox as it is now (it keeps running). */
  async snapshot(dest: string): Promise<void> {
    mkdirSync(dest, { recursive: true, mode: 0o700 });
    await this.inst.snapshot(dest, { kind: "filesystem", paused: false });
  }

  /** Stops it and removes its directory; idempotent. */
  async kill(): Promise<void> {
    this.endpoint.close();
    await this.inst.kill().catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
