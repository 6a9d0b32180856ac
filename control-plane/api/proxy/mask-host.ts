/**
 * E2B's `network.maskRequestHost`: requests to a sandbox's user ports (never
 * envd's) reach the server in the sandbox with this Host instead of the
 * client's (`<port>-<id>.<domain>`), for servers that check the Host they
 * are called by (dev servers' DNS-rebinding guards). Each `${PORT}` becomes
 * the port asked for; the client's Host goes on in `X-Forwarded-Host`, as
 * E2B's proxy does.
 */
export const PORT_PLACEHOLDER = "${PORT}";

/** At most this long, as a DNS name with a port. */
const MAX_LENGTH = 261;
/** A host name or IP literal (IPv6 in brackets), an optional port: what a Host header holds. */
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._~-]*[A-Za-z0-9_])?)(?::\d{1,5})?$/;

/** Why `value` cannot be a maskRequestHost, or undefined when it can ("" means no mask). */
export function maskRequestHostProblem(value: unknown): string | undefined {
  if (value === undefined || value === null || value === "") return undefined;
  if (typeof value !== "string") return "network.maskRequestHost must be a string, e.g. 'localhost:${PORT}'";
  if (value.length > MAX_LENGTH || !HOST.test(value.split(PORT_PLACEHOLDER).join("1"))) {
    return `network.maskRequestHost ${JSON.stringify(value)} is not a host name with an optional port (${PORT_PLACEHOLDER} stands for the port asked for), e.g. 'localhost:${PORT_PLACEHOLDER}'`;
  }
  return undefined;
}

/** The Host a request to `port` goes on with, or undefined when the sandbox has no mask. */
export function maskedHost(template: string | undefined, port: number): string | undefined {
  return template ? template.split(PORT_PLACEHOLDER).join(String(port)) : undefined;
}

/**
 * Raw request headers with Host replaced by `host` (where the client's was)
 * and the client's Host as the only `X-Forwarded-Host`.
 */
export function withMaskedHost(raw: string[], host: string): string[] {
  const out: string[] = [];
  let original = "";
  let placed = false;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (name === "x-forwarded-host") continue;
    if (name === "host") {
      original = raw[i + 1]!;
      if (placed) continue;
      placed = true;
      out.push(raw[i]!, host);
      continue;
    }
    out.push(raw[i]!, raw[i + 1]!);
  }
  if (!placed) out.unshift("Host", host);
  out.push("X-Forwarded-Host", original);
  return out;
}
