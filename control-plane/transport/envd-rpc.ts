import type { DescService } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ENVD_PORT } from "../../envd/version.js";
import type { Endpoint } from "./endpoint.js";

/** One sandbox's envd, and the token it wants. */
export interface EnvdTarget {
  endpoint: Endpoint;
  token: string;
}

/**
 * Connect clients for a sandbox's envd RPCs (process.Process,
 * filesystem.Filesystem, locale2b.envd.v1.ActivityService), made by the
 * control plane itself over the sandbox's pooled vsock connections, in
 * Connect's binary format (`json`: Connect's JSON, as the E2B SDKs speak).
 * `user` is the Basic-auth user envd acts as (default: envd's default user).
 */
export class EnvdRpc {
  client<S extends DescService>(service: S, target: EnvdTarget, user?: string, json = false): Client<S> {
    const headers: [string, string][] = target.token ? [["x-access-token", target.token]] : [];
    if (user) headers.push(["authorization", `Basic ${Buffer.from(`${user}:`).toString("base64")}`]);
    const addHeaders: Interceptor = (next) => (req) => {
      for (const [k, v] of headers) req.header.set(k, v);
      return next(req);
    };
    // A transport per call: the endpoint hands out a new agent after the sandbox's connections were dropped.
    const transport = createConnectTransport({
      baseUrl: `http://${ENVD_PORT}-${target.endpoint.sandboxId}`,
      httpVersion: "1.1",
      useBinaryFormat: !json,
      acceptCompression: [],
      sendCompression: undefined,
      interceptors: [addHeaders],
      nodeOptions: { agent: target.endpoint.agent() },
    });
    return createClient(service, transport);
  }
}
