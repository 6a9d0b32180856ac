import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Filesystem } from "../../gen/ts/filesystem/filesystem_pb.js";
import { Process } from "../../gen/ts/process/process_pb.js";
import { startEnvd, type EnvdOptions, type RunningEnvd } from "../../envd/main.js";
import { requireHostEnvdTag, SELF, testEtc } from "./accounts.js";

export interface TestEnvd extends RunningEnvd {
  url: string;
  /** A fresh temporary directory, removed on close. */
  dir: string;
}

/**
 * Starts a real envd on 127.0.0.1 with a random port, acting as SELF (the
 * user the tests run as, who owns `dir`) unless `opts.defaultUser` names
 * another (given as undefined: envd picks, as without --user), with the
 * accounts of testEtc() unless `opts.etc` gives others: what it does never
 * depends on the host's accounts (test/helpers/accounts.ts).
 */
export async function startTestEnvd(opts: Partial<EnvdOptions> = {}): Promise<TestEnvd> {
  requireHostEnvdTag();
  const dir = mkdtempSync(join(tmpdir(), "locale2b-test-"));
  // envd acts as the requesting user: other users must be able to reach what tests make here.
  chmodSync(dir, 0o755);
  const etc = opts.etc ? undefined : testEtc();
  let envd: RunningEnvd;
  try {
    envd = await startEnvd({ listen: ["tcp://127.0.0.1:0"], defaultUser: SELF.name, etc: etc?.dir, ...opts });
  } catch (err) {
    etc?.remove();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    ...envd,
    url: envd.url!,
    dir,
    async close() {
      await envd.close();
      etc?.remove();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type ProtocolName = "connect-json" | "connect-binary" | "grpc" | "grpc-web";
export const PROTOCOLS: ProtocolName[] = ["connect-json", "connect-binary", "grpc", "grpc-web"];

export function transport(url: string, protocol: ProtocolName): Transport {
  switch (protocol) {
    case "connect-json":
      return createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: false });
    case "connect-binary":
      return createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: true });
    case "grpc":
      return createGrpcTransport({ baseUrl: url });
    case "grpc-web":
      return createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1" });
  }
}

export function clients(url: string, protocol: ProtocolName = "connect-json"): {
  process: Client<typeof Process>;
  fs: Client<typeof Filesystem>;
} {
  const t = transport(url, protocol);
  return { process: createClient(Process, t), fs: createClient(Filesystem, t) };
}

/** `Authorization: Basic base64(user:)`, as the SDKs send it. */
export function basicAuth(user: string): Record<string, string> {
  return { authorization: `Basic ${Buffer.from(`${user}:`).toString("base64")}` };
}
