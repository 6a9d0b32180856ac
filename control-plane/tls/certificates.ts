// The certificate and key pairs `serve --tls-cert/--tls-key` serves: read
// from their files and checked (PEM, the key is the certificate's), with the
// names each one covers, for SNI and for the start banner's warnings.
import { createHash, createPrivateKey, X509Certificate, type KeyObject } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import tls from "node:tls";

/** One `--tls-cert FILE --tls-key FILE` pair, as given. */
export interface TlsFiles {
  /** PEM: the certificate, then any intermediates (a "fullchain"). */
  cert: string;
  /** PEM: its private key, unencrypted. */
  key: string;
}

/** A pair that cannot be served: unreadable, not PEM, or a key that is not the certificate's. */
export class TlsConfigError extends Error {
  override name = "TlsConfigError";
}

export interface CertificatePair {
  files: TlsFiles;
  /** The certificate chain and key as read (what setSecureContext gets). */
  cert: Buffer;
  key: Buffer;
  /** DNS names (lower case, wildcards kept) and IP addresses it is valid for: its subjectAltName, else its CN. */
  names: string[];
  notAfter: Date;
  /** SHA-256 of the leaf certificate (DER), colon-separated hex as Node prints it. */
  fingerprint256: string;
  /** Built once loaded: what SNI hands out for this pair. */
  context: tls.SecureContext;
  /** Of the cert and key files' bytes together: a reload with the same files changes nothing. */
  digest: string;
  /** The key file's permission bits (0o600 is what it should be). */
  keyMode: number;
}

async function read(kind: string, file: string): Promise<Buffer> {
  try {
    return await readFile(file);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const why = e.code === "ENOENT" ? "no such file" : e.code === "EACCES" ? "permission denied" : e.message;
    throw new TlsConfigError(`cannot read the TLS ${kind} ${file}: ${why}`);
  }
}

/** The names a certificate covers: its subjectAltName's DNS names and IP addresses, else its subject's CN. */
export function certificateNames(cert: X509Certificate): string[] {
  const names: string[] = [];
  for (const part of (cert.subjectAltName ?? "").split(/,\s*/)) {
    const m = /^(DNS|IP Address):(.+)$/.exec(part.trim());
    if (m) names.push(m[1] === "DNS" ? m[2]!.toLowerCase() : m[2]!);
  }
  if (names.length) return names;
  const cn = /(?:^|\n)CN=([^\n]+)/.exec(cert.subject)?.[1];
  return cn ? [cn.toLowerCase()] : [];
}

/** Reads and checks one pair; a TlsConfigError says what is wrong with which file. */
export async function loadPair(files: TlsFiles): Promise<CertificatePair> {
  const [certPem, keyPem] = await Promise.all([read("certificate", files.cert), read("key", files.key)]);
  const keyMode = (await stat(files.key)).mode & 0o777;
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(certPem);
  } catch (err) {
    throw new TlsConfigError(`the TLS certificate ${files.cert} is not a PEM certificate (${(err as Error).message})`);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(keyPem);
  } catch (err) {
    const msg = (err as Error).message;
    const hint = /passphrase|encrypted/i.test(msg) || keyPem.includes("ENCRYPTED") ? ": it is encrypted; give the key without a passphrase (openssl pkey -in KEY -out KEY.plain)" : ` (${msg})`;
    throw new TlsConfigError(`the TLS key ${files.key} is not a PEM private key${hint}`);
  }
  if (!cert.checkPrivateKey(key)) {
    throw new TlsConfigError(
      `the TLS key ${files.key} is not the key of the certificate ${files.cert} (${certificateNames(cert).join(", ") || cert.subject}): give the key the certificate was made for`,
    );
  }
  let context: tls.SecureContext;
  try {
    context = tls.createSecureContext({ cert: certPem, key: keyPem });
  } catch (err) {
    throw new TlsConfigError(`the TLS certificate ${files.cert} and key ${files.key} cannot be served: ${(err as Error).message}`);
  }
  return {
    files,
    cert: certPem,
    key: keyPem,
    names: certificateNames(cert),
    notAfter: new Date(cert.validTo),
    fingerprint256: cert.fingerprint256,
    context,
    digest: createHash("sha256").update(certPem).update("\0").update(keyPem).digest("hex"),
    keyMode,
  };
}

/** Every pair, in order; the first error stops it. */
export function loadPairs(files: TlsFiles[]): Promise<CertificatePair[]> {
  return Promise.all(files.map(loadPair));
}

/**
 * Whether `name` (a certificate's DNS name, maybe `*.example.com`) matches
 * `host`: a wildcard stands for exactly one left-most label, as clients
 * check it (RFC 6125), and never for a bare top-level name.
 */
export function nameMatches(name: string, host: string): boolean {
  const h = host.toLowerCase().replace(/\.$/, "");
  if (!name.startsWith("*.")) return name === h;
  const base = name.slice(2);
  if (!base.includes(".")) return false;
  const dot = h.indexOf(".");
  return dot > 0 && h.slice(dot + 1) === base;
}

export function covers(names: readonly string[], host: string): boolean {
  return names.some((n) => nameMatches(n, host));
}

/** The pair for an SNI server name: an exact name first, then a wildcard; undefined when none covers it. */
export function pairFor(pairs: readonly CertificatePair[], servername: string): CertificatePair | undefined {
  const host = servername.toLowerCase();
  return pairs.find((p) => p.names.includes(host)) ?? pairs.find((p) => covers(p.names, host));
}

/** The domain a wildcard certificate is for (`*.example.com` → `example.com`), from the first pair that has one. */
export function wildcardDomain(pairs: readonly CertificatePair[]): string | undefined {
  for (const p of pairs) {
    const w = p.names.find((n) => n.startsWith("*.") && n.slice(2).includes("."));
    if (w) return w.slice(2);
  }
  return undefined;
}

/**
 * What an operator should hear at start: a certificate that does not cover
 * the sandbox hosts (`<port>-<id>.<domain>`) or the API host, one that has
 * expired, a key file other users can read.
 */
export function tlsWarnings(pairs: readonly CertificatePair[], domain: string | undefined, now = new Date()): string[] {
  const out: string[] = [];
  const all = pairs.flatMap((p) => p.names);
  const bare = domain?.replace(/:\d+$/, "").toLowerCase();
  if (bare && bare !== "localhost" && !covers(all, `49983-sandboxid.${bare}`)) {
    out.push(`TLS: no certificate covers the sandbox hosts <port>-<id>.${bare} (served names: ${all.join(", ") || "none"}): give a wildcard certificate for *.${bare}`);
  }
  for (const p of pairs) {
    if (p.notAfter <= now) out.push(`TLS: the certificate ${p.files.cert} (${p.names.join(", ")}) expired on ${p.notAfter.toISOString()}`);
    if (p.keyMode & 0o077) out.push(`TLS: the key ${p.files.key} can be read by other users (mode ${p.keyMode.toString(8)}): chmod 600 it`);
  }
  return out;
}
