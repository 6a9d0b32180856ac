// The Kubernetes API as a fleet process in a pod sees it: the pod's
// service-account credentials and a few JSON calls over plain HTTPS. The
// fleet reads Node objects (cordon, readiness), the `kubernetes` Service's
// endpoints, and keeps one Lease per node (liveness); for that much it needs
// no client library.
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
        res.on("end", () => {
          try {
            resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as unknown });
          } catch {
            resolve({ status: res.statusCode ?? 0, body: text });
          }
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer from ${c.server} in ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end(payload);
  });
}

/** The apiserver's error for a call that did not answer `ok`: `<what>: <status> <its message>`. */
export function kubeError(what: string, a: KubeAnswer): Error {
  const msg = (a.body as { message?: string } | undefined)?.message ?? String(a.body).slice(0, 200);
  return new Error(`${what}: ${a.status} ${msg}`);
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
