// What the egress proxies need to intercept (network.rules), set once by the
// server: where its CA lives (made there on first use: ca.ts) and which CAs
// upstream certificates are verified against (the host's bundle, plus
// LOCALE2B_EGRESS_UPSTREAM_CA's file when set).
import { existsSync, readFileSync } from "node:fs";
import tls from "node:tls";
import { loadOrCreateCa, type EgressCa } from "./ca.js";

/** The host's CA bundle (Debian's; others' where Debian's is missing), else Node's own list. */
const SYSTEM_BUNDLES = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

let settings: { caDir: string; upstreamCaFile?: string } | undefined;
let loaded: { ca: EgressCa; upstream: tls.SecureContext } | undefined;

export function configureInterception(s: { caDir: string; upstreamCaFile?: string } | undefined): void {
  settings = s;
  loaded = undefined;
}

/** Why this server cannot intercept (no CA directory configured), or undefined when it can. */
export function interceptionUnsupported(): string | undefined {
  return settings ? undefined : "this server has no data directory for the egress CA";
}

/** The CA and the upstream trust (loaded, and the CA made, on first use). Throws when it cannot. */
export function interception(): { ca: EgressCa; upstream: tls.SecureContext } {
  if (loaded) return loaded;
  if (!settings) throw new Error(interceptionUnsupported());
  const system = SYSTEM_BUNDLES.find((f) => existsSync(f));
  const cas = [...(system ? [readFileSync(system, "utf8")] : tls.rootCertificates)];
  if (settings.upstreamCaFile) cas.push(readFileSync(settings.upstreamCaFile, "utf8"));
  loaded = { ca: loadOrCreateCa(settings.caDir), upstream: tls.createSecureContext({ ca: cas }) };
  return loaded;
}
