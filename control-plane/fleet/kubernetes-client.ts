// The Kubernetes API as a fleet process in a pod sees it: the pod's
// service-account credentials, a few JSON calls over plain HTTPS, and watch
// streams (one JSON event a line). The fleet watches Node objects (cordon,
// readiness) and its nodes' Leases (liveness: kubernetes-watch.ts), reads
// the `kubernetes` Service's endpoints, and keeps one Lease per node; for
// that much it needs no client library.
import { readFileSync } from "node:fs";
import https from "node:https";

const SA = "/var/run/secrets/kubernetes.io/serviceaccount";

export interface InCluster {
  /** https://host:port of the apiserver (the `kubernetes` Service). */
  server: string;
  token: string;
  ca: Buffer;
  /** The pod's namespace (where the fleet's Leases live). */
  namespace: string;
}

/** The pod's in-cluster credentials, or undefined outside Kubernetes (or without a service-account token). */
export function inCluster(env: NodeJS.ProcessEnv = process.env): InCluster | undefined {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) return undefined;
  try {
    return {
      server: `https://${host.includes(":") ? `[${host}]` : host}:${port}`,
      token: readFileSync(`${SA}/token`, "utf8").trim(),
      ca: readFileSync(`${SA}/ca.crt`),
      namespace: readFileSync(`${SA}/namespace`, "utf8").trim() || "default",
    };
  } catch {
    return undefined;
  }
}

export interface KubeAnswer {
  status: number;
  body: unknown;
}

/** An answer's body: its JSON, or the text when it is not JSON. */
function bodyOf(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/** One call to the apiserver: its status and parsed JSON body (the text when it is not JSON). */
export function kubeRequest(c: InCluster, method: string, path: string, body?: unknown, contentType = "application/json", timeoutMs = 5_000): Promise<KubeAnswer> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${c.server}${path}`,
      {
        method,
        ca: c.ca,
        timeout: timeoutMs,
        headers: {
          authorization: `Bearer ${c.token}`,
          accept: "application/json",
          ...(payload === undefined ? {} : { "content-type": contentType, "content-length": Buffer.byteLength(payload) }),
        },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8").on("data", (d: string) => (text += d));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: bodyOf(text) }));
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer from ${c.server} in ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end(payload);
  });
}

/** The apiserver's error for a call that did not answer `ok`: `<what>: <status> <its message>`. */
export function kubeError(what: string, a: KubeAnswer): KubeError {
  const msg = (a.body as { message?: string } | undefined)?.message ?? String(a.body).slice(0, 200);
  return new KubeError(`${what}: ${a.status} ${msg}`, a.status);
}

/** A call that did not answer `ok`, with the apiserver's status (410: a watch's resourceVersion is too old). */
export class KubeError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/** GET a path; its JSON body when 200, else an error that names the call. */
export async function kubeGet<T>(c: InCluster, path: string, what: string): Promise<T> {
  const a = await kubeRequest(c, "GET", path);
  if (a.status !== 200) throw kubeError(what, a);
  return a.body as T;
}

/** The addresses the Kubernetes API is served at: its Service's ClusterIP and its endpoints (the apiservers). */
export async function apiserverAddresses(c: InCluster): Promise<string[]> {
  const out = [new URL(c.server).hostname.replace(/^\[|\]$/g, "")];
  const body = await kubeGet<{ subsets?: { addresses?: { ip?: string }[] }[] }>(c, "/api/v1/namespaces/default/endpoints/kubernetes", "GET endpoints default/kubernetes");
  for (const subset of body.subsets ?? []) for (const a of subset.addresses ?? []) if (a.ip) out.push(a.ip);
  return out;
}

/** A watch stream as it runs: `ended` resolves when the apiserver ends it (its timeoutSeconds), rejects on an error. */
export interface KubeStream {
  ended: Promise<void>;
  /** Ends it from this side (`ended` resolves). */
  close(): void;
}

/**
 * GET a watch path (`...?watch=1&resourceVersion=...`) and hand each event
 * (one JSON object a line) to `onEvent` as it comes. No byte for `idleMs`
 * ends it with an error: a connection that died without a word must not
 * look like a quiet one.
 */
export function kubeStream(c: InCluster, path: string, what: string, onEvent: (event: unknown) => void, idleMs: number): KubeStream {
  let close = () => {};
  const ended = new Promise<void>((resolve, reject) => {
    const req = https.request(`${c.server}${path}`, { method: "GET", ca: c.ca, headers: { authorization: `Bearer ${c.token}`, accept: "application/json" } }, (res) => {
      res.setEncoding("utf8");
      if (res.statusCode !== 200) {
        let text = "";
        res.on("data", (d: string) => (text += d));
        res.on("end", () => reject(kubeError(what, { status: res.statusCode ?? 0, body: bodyOf(text) })));
        return;
      }
      let partial = "";
      res.on("data", (d: string) => {
        const lines = (partial + d).split("\n");
        partial = lines.pop()!;
        for (const line of lines) {
          if (!line.trim()) continue;
          try {
            onEvent(JSON.parse(line));
          } catch (err) {
            req.destroy(new Error(`${what}: an event that is not JSON (${(err as Error).message}): ${line.slice(0, 200)}`));
            return;
          }
        }
      });
      res.on("end", () => resolve());
      res.on("aborted", () => reject(new Error(`${what}: the apiserver cut the stream`)));
      res.on("error", reject);
    });
    req.setTimeout(idleMs, () => req.destroy(new Error(`${what}: no event or bookmark for ${Math.round(idleMs / 1000)} s`)));
    req.on("error", reject);
    req.end();
    close = () => {
      req.destroy();
      resolve();
    };
  });
  return { ended, close: () => close() };
}
