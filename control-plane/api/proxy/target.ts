// Where a proxied request goes, read from the request alone: the SDKs'
// routing headers (E2B_SANDBOX_URL), a `<port>-<id>.<domain>` Host
// (getHost), or a signed /files URL (uploadUrl / downloadUrl).
import type { IncomingMessage } from "node:http";
import { ENVD_PORT } from "../../../envd/version.js";
import { SANDBOX_ID_RE } from "../../manager/ids.js";

export /** Where a request goes: a sandbox id (undefined for a signed /files URL: found by its signature) and port. */
interface Target {
  sandboxId: string | undefined;
  port: number;
}

function hostTarget(host: string | undefined, suffix: string): Target | undefined {
  if (!host || !host.includes("-")) return undefined;
  const colon = host.lastIndexOf(":");
  const name = (colon > 0 && !host.endsWith("]") ? host.slice(0, colon) : host).toLowerCase();
  if (!name.endsWith(suffix)) return undefined;
  const label = name.slice(0, name.length - suffix.length);
  const dash = label.indexOf("-");
  const port = Number(label.slice(0, dash));
  const id = label.slice(dash + 1);
  if (dash < 1 || !Number.isInteger(port) || !SANDBOX_ID_RE.test(id)) return undefined;
  return { sandboxId: id, port };
}

/** The request's target, or undefined when it is not for a sandbox; `hostSuffix` is `.<domain>`, lower case. */
export function requestTarget(req: IncomingMessage, hostSuffix: string): Target | undefined {
  const id = req.headers["e2b-sandbox-id"];
  if (id !== undefined) {
    const rawPort = req.headers["e2b-sandbox-port"];
    return { sandboxId: String(id), port: rawPort === undefined || rawPort === "" ? ENVD_PORT : Number(rawPort) };
  }
  const byHost = hostTarget(req.headers.host ?? (req.headers[":authority"] as string | undefined), hostSuffix);
  if (byHost) return byHost;
  const url = req.url;
  if (url && url.startsWith("/files?") && url.includes("signature=") && (req.method === "GET" || req.method === "POST")) {
    return { sandboxId: undefined, port: ENVD_PORT };
  }
  return undefined;
}
