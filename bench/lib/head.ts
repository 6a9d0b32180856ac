import type { Client } from "@connectrpc/connect";
import { spawn } from "node:child_process";
import type { Process } from "../../gen/ts/process/process_pb.js";

// `head -c N /dev/zero`: the stream the throughput benchmarks move, through envd and as a raw pipe.

/** Runs head in the sandbox through `client` and counts its stdout bytes (exit code 0 required). */
export async function streamHead(client: Client<typeof Process>, bytes: number): Promise<number> {
  let got = 0;
  let exitCode: number | undefined;
  for await (const res of client.start({ process: { cmd: "head", args: ["-c", String(bytes), "/dev/zero"] }, stdin: false })) {
    const e = res.event?.event;
    if (e?.case === "data" && e.value.output.case === "stdout") got += e.value.output.value.length;
    else if (e?.case === "end") exitCode = e.value.exitCode;
  }
  if (exitCode !== 0) throw new Error(`Start head: no end event with exit code 0 (got ${exitCode})`);
  return got;
}

/** The baseline: the same head spawned here, its pipe read here. */
export function rawPipe(bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn("head", ["-c", String(bytes), "/dev/zero"], { stdio: ["ignore", "pipe", "ignore"] });
    let got = 0;
    child.stdout!.on("data", (c: Buffer) => (got += c.length));
    child.once("error", reject);
    child.once("close", (code) => (code === 0 ? resolve(got) : reject(new Error(`head exited ${code}`))));
  });
}
