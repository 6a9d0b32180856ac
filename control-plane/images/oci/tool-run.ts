// Runs skopeo and umoci: killed when the pull's signal fires (a time limit
// or a cancel), stdout kept up to a bound (manifests), the tail of stderr
// kept for the error message, output lines handed to the log as they come.
import { spawn } from "node:child_process";

export interface ToolRunOptions {
  env: NodeJS.ProcessEnv;
  signal?: AbortSignal;
  /** Bytes of stdout kept (a manifest); more fails the run. 0: stdout is only passed to onLine. */
  maxStdout?: number;
  onLine?: (line: string) => void;
}

/** The tool exited non-zero: its last output says why. */
export class ToolFailed extends Error {
  constructor(
    readonly tool: string,
    readonly code: number | null,
    readonly tail: string,
  ) {
    super(`${tool} ${code === null ? "was killed" : `exited ${code}`}${tail ? `: ${tail}` : ""}`);
    this.name = "ToolFailed";
  }
}

const TAIL = 4096;

/** Whole lines of one stream, blank ones dropped. */
function splitLines(onLine: ((line: string) => void) | undefined) {
  let partial = "";
  return {
    push(chunk: Buffer) {
      if (!onLine) return;
      const parts = (partial + chunk.toString("utf8")).split("\n");
      partial = parts.pop() ?? "";
      for (const l of parts) if (l.trim()) onLine(l.trimEnd());
    },
    end() {
      if (onLine && partial.trim()) onLine(partial.trimEnd());
      partial = "";
    },
  };
}

export function runTool(file: string, args: string[], o: ToolRunOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env: o.env, cwd: "/", stdio: ["ignore", "pipe", "pipe"], signal: o.signal, killSignal: "SIGKILL" });
    const out: Buffer[] = [];
    let outBytes = 0;
    let overflow = false;
    let tail = "";
    const stdoutLines = splitLines(o.onLine);
    const stderrLines = splitLines(o.onLine);
    child.stdout.on("data", (chunk: Buffer) => {
      if (o.maxStdout) {
        outBytes += chunk.length;
        if (outBytes > o.maxStdout) {
          overflow = true;
          child.kill("SIGKILL");
        } else out.push(chunk);
      }
      stdoutLines.push(chunk);
    });
    child.stderr.on("data", (chunk: Buffer) => {
      tail = (tail + chunk.toString("utf8")).slice(-TAIL);
      stderrLines.push(chunk);
    });
    let error: Error | undefined;
    child.on("error", (err) => (error = err));
    child.on("close", (code) => {
      stdoutLines.end();
      stderrLines.end();
      if (error) return reject(error);
      if (overflow) return reject(new ToolFailed(file, code, `its output exceeded ${o.maxStdout} bytes`));
      if (code !== 0) return reject(new ToolFailed(file, code, tail.trim()));
      resolve(Buffer.concat(out));
    });
  });
}
