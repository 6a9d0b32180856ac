// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// gRPC server reflection: `buf curl` without --schema against a real envd,
// and the reflection service itself through the generated TS client.
import { create, createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema, type FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as v1 from "../../gen/ts/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../../gen/ts/grpc/reflection/v1alpha/reflection_pb.js";
import { startTestEnvd, type TestEnvd } from "../helpers/envd.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const BUF = join(root, "node_modules", ".bin", "buf");

let envd: TestEnvd;
beforeAll(async () => {
  envd = await startTestEnvd();
});
afterAll(async () => {
  await envd?.close();
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `buf curl` asynchronously: envd runs in this process, so a sync spawn would deadlock. */
function bufCurl(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(BUF, ["curl", ...args], { timeout: 30_000, env: { ...process.env, NO_COLOR: "1" } }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

function expectOk(run: Run): void {
  expect(run, `buf curl failed:\n${run.stderr}${run.stdout}`).toMatchObject({ code: 0 });
}

const H2C_PROTOCOLS = ["grpc", "connect"] as const;

describe("buf curl with server reflection (no --schema)", () => {
  it.each(H2C_PROTOCOLS)("--list-services over h2c (%s)", async (protocol) => {
    const run = await bufCurl(["--http2-prior-knowledge", "--protocol", protocol, "--list-services", envd.url]);
    expectOk(run);
    const services = run.stdout.trim().split("\n");
    expect(services).toEqual(expect.arrayContaining([
      "process.Process",
      "filesystem.Filesystem",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
    ]));
  });

  it("--list-methods through the v1alpha reflection protocol", async () => {
    const run = await bufCurl(["--http2-prior-knowledge", "--protocol", "grpc", "--reflect-protocol", "grpc-v1alpha", "--list-methods", envd.url]);
    expectOk(run);
    expect(run.stdout).toContain("process.Process/Start");
    expect(run.stdout).toContain("filesystem.Filesystem/Stat");
  });

  it.each(H2C_PROTOCOLS)("process.Process/List over h2c (%s) returns JSON", async (protocol) => {
    const run = await bufCurl(["--http2-prior-knowledge", "--protocol", protocol, "-d", "{}", `${envd.url}/process.Process/List`]);
    expectOk(run);
    const body = JSON.parse(run.stdout) as { processes?: unknown };
    expect(typeof body).toBe("object");
    if (body.processes !== undefined) expect(Array.isArray(body.processes)).toBe(true);
  });

  // Resolving StatResponse needs google/protobuf/timestamp.proto: a transitive import served by reflection.
  it.each(H2C_PROTOCOLS)("filesystem.Filesystem/Stat {path: /} over h2c (%s) is a directory", async (protocol) => {
    const run = await bufCurl(["--http2-prior-knowledge", "--protocol", protocol, "-d", '{"path":"/"}', `${envd.url}/filesystem.Filesystem/Stat`]);
    expectOk(run);
    const body = JSON.parse(run.stdout) as { entry?: { type?: string; path?: string } };
    expect(body.entry?.type).toBe("FILE_TYPE_DIRECTORY");
    expect(body.entry?.path).toBe("/");
  });
});

describe("reflection service through the generated TS client", () => {
  type Req = Parameters<typeof create<typeof v1.ServerReflectionRequestSchema>>[1];

  /** Sends all requests on one bidi stream and collects the answers. */
  async function ask(requests: Req[], protocol: "grpc" | "connect-h2c" = "grpc"): Promise<v1.ServerReflectionResponse[]> {
    const transport = protocol === "grpc"
      ? createGrpcTransport({ baseUrl: envd.url })
      : createConnectTransport({ baseUrl: envd.url, httpVersion: "2" });
    const client = createClient(v1.ServerReflection, transport);
    async function* input() {
      for (const r of requests) yield create(v1.ServerReflectionRequestSchema, r);
    }
    const out: v1.ServerReflectionResponse[] = [];
    for await (const res of client.serverReflectionInfo(input())) out.push(res);
    return out;
  }

  function filesOf(res: v1.ServerReflectionResponse): FileDescriptorProto[] {
    expect(res.messageResponse.case).toBe("fileDescriptorResponse");
    if (res.messageResponse.case !== "fileDescriptorResponse") return [];
    return res.messageResponse.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b));
  }

  it("list_services names every served service", async () => {
    const [res] = await ask([{ host: "envd", messageRequest: { case: "listServices", value: "*" } }]);
    expect(res!.validHost).toBe("envd");
    expect(res!.originalRequest?.messageRequest.case).toBe("listServices");
    expect(res!.messageResponse.case).toBe("listServicesResponse");
    if (res!.messageResponse.case !== "listServicesResponse") return;
    expect(res!.messageResponse.value.service.map((s) => s.name).sort()).toEqual([
      "filesystem.Filesystem",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
      "locale2b.envd.v1.ActivityService",
      "process.Process",
    ]);
  });

  it("file_containing_symbol process.Process returns process/process.proto", async () => {
    const [res] = await ask([{ messageRequest: { case: "fileContainingSymbol", value: "process.Process" } }]);
    const files = filesOf(res!);
    expect(files[0]!.name).toBe("process/process.proto");
    expect(files[0]!.service.map((s) => s.name)).toEqual(["Process"]);
    expect(files[0]!.service[0]!.method.map((m) => m.name)).toContain("Start");
  });

  it("answers several requests on one stream, for methods, nested messages, enums and enum values", async () => {
    const symbols = [
      "process.Process.Start",
      "process.ProcessEvent.StartEvent",
      "process.Signal",
      "process.SIGNAL_SIGKILL",
      "filesystem.FileType",
      "filesystem.EntryInfo.modified_time",
      "google.protobuf.Timestamp",
    ];
    const res = await ask(symbols.map((value) => ({ messageRequest: { case: "fileContainingSymbol", value } })));
    expect(res.map((r) => filesOf(r)[0]!.name)).toEqual([
      "process/process.proto",
      "process/process.proto",
      "process/process.proto",
      "process/process.proto",
      "filesystem/filesystem.proto",
      "filesystem/filesystem.proto",
      "google/protobuf/timestamp.proto",
    ]);
  });

  it("sends transitive dependencies, enough to build a registry", async () => {
    const [res] = await ask([{ messageRequest: { case: "fileContainingSymbol", value: "filesystem.Filesystem" } }]);
    const files = filesOf(res!);
    expect(files.map((f) => f.name)).toEqual(["filesystem/filesystem.proto", "google/protobuf/timestamp.proto"]);
    // The requested file comes first; a FileDescriptorSet wants imports first.
    const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: [...files].reverse() }));
    expect(registry.getMessage("filesystem.EntryInfo")?.field.modifiedTime?.message?.typeName).toBe("google.protobuf.Timestamp");
    expect(registry.getService("filesystem.Filesystem")?.method.stat?.methodKind).toBe("unary");
  });

  it("file_by_filename serves imported well-known files", async () => {
    const [res] = await ask([{ messageRequest: { case: "fileByFilename", value: "google/protobuf/timestamp.proto" } }], "connect-h2c");
    expect(filesOf(res!).map((f) => f.name)).toEqual(["google/protobuf/timestamp.proto"]);
  });

  it("unknown symbols, files and extensions get error_response NOT_FOUND (code 5), and the stream goes on", async () => {
    const res = await ask([
      { messageRequest: { case: "fileContainingSymbol", value: "nope.Nothing" } },
      { messageRequest: { case: "fileByFilename", value: "nope/nothing.proto" } },
      { messageRequest: { case: "fileContainingExtension", value: { containingType: "process.StartRequest", extensionNumber: 100 } } },
      { messageRequest: { case: "allExtensionNumbersOfType", value: "nope.Nothing" } },
      { messageRequest: { case: "listServices", value: "" } },
    ]);
    expect(res).toHaveLength(5);
    for (const r of res.slice(0, 4)) {
      expect(r.messageResponse.case).toBe("errorResponse");
      if (r.messageResponse.case === "errorResponse") expect(r.messageResponse.value.errorCode).toBe(5);
    }
    expect(res[4]!.messageResponse.case).toBe("listServicesResponse");
  });

  it("all_extension_numbers_of_type of a known message is an empty list", async () => {
    const [res] = await ask([{ messageRequest: { case: "allExtensionNumbersOfType", value: "process.StartRequest" } }]);
    expect(res!.messageResponse).toMatchObject({
      case: "allExtensionNumbersResponse",
      value: { baseTypeName: "process.StartRequest", extensionNumber: [] },
    });
  });

  it("v1alpha answers the same way", async () => {
    const client = createClient(v1alpha.ServerReflection, createGrpcTransport({ baseUrl: envd.url }));
    async function* input() {
      yield create(v1alpha.ServerReflectionRequestSchema, { messageRequest: { case: "fileContainingSymbol", value: "process.Process" } });
      yield create(v1alpha.ServerReflectionRequestSchema, { messageRequest: { case: "fileContainingSymbol", value: "nope.Nothing" } });
    }
    const res: v1alpha.ServerReflectionResponse[] = [];
    for await (const r of client.serverReflectionInfo(input())) res.push(r);
    expect(res[0]!.messageResponse.case).toBe("fileDescriptorResponse");
    if (res[0]!.messageResponse.case === "fileDescriptorResponse") {
      expect(fromBinary(FileDescriptorProtoSchema, res[0]!.messageResponse.value.fileDescriptorProto[0]!).name).toBe("process/process.proto");
    }
    expect(res[1]!.messageResponse).toMatchObject({ case: "errorResponse", value: { errorCode: 5 } });
  });
});
