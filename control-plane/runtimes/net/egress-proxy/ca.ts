// The certificate authority the egress proxy signs its per-host certificates
// with when it terminates TLS for a host with request rules (intercept.ts).
// Made once per data directory (`<data dir>/egress-ca/`: ca.key mode 0600 in
// a 0700 folder, ca.crt), kept on the host only: sandboxes get the
// certificate (trust-install.ts), never the key. X.509 is signed with
// node-forge (Node's crypto makes keys but cannot sign certificates); the
// keys are Node's (RSA 2048, made natively). One leaf key serves every host
// (as mitmproxy does): what differs per host is the certificate, cached.
import { createPrivateKey, generateKeyPairSync, randomBytes, X509Certificate } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import forge from "node-forge";

const CA_YEARS = 10;
const LEAF_DAYS = 30;
/** A cached leaf is re-made once it is this old (well before it expires). */
const LEAF_REFRESH_MS = 7 * 24 * 3600_000;
const MAX_CACHED = 2048;

export interface EgressCa {
  /** The CA certificate, PEM: what sandboxes trust. */
  certPem: string;
  /** SHA-256 fingerprint of the CA certificate (colon-separated hex), to tell CAs apart. */
  fingerprint: string;
  /** A TLS context presenting a certificate for `name` signed by this CA (cached). */
  contextFor(name: string): tls.SecureContext;
}

function rsaPair(): { privateKey: string; publicKey: string } {
  return generateKeyPairSync("rsa", { modulusLength: 2048, publicKeyEncoding: { type: "spki", format: "pem" }, privateKeyEncoding: { type: "pkcs8", format: "pem" } });
}

/** A random positive serial (RFC 5280 §4.1.2.2: at most 20 octets). */
const serial = () => "01" + randomBytes(15).toString("hex");

function makeCaFiles(dir: string): void {
  const { privateKey, publicKey } = rsaPair();
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey);
  cert.serialNumber = serial();
  cert.validity.notBefore = new Date(Date.now() - 3600_000);
  cert.validity.notAfter = new Date(Date.now() + CA_YEARS * 365 * 24 * 3600_000);
  const subject = [
    { name: "commonName", value: `locale2b egress CA (${hostname()})` },
    { name: "organizationName", value: "locale2b" },
  ];
  cert.setSubject(subject);
  cert.setIssuer(subject);
  cert.setExtensions([
    { name: "basicConstraints", cA: true, pathLenConstraint: 0, critical: true },
    { name: "keyUsage", keyCertSign: true, cRLSign: true, critical: true },
    { name: "subjectKeyIdentifier" },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(privateKey), forge.md.sha256.create());
  // The key first, 0600 before a byte of it is written, each through a rename (no half-written file is ever read).
  writeFileSync(join(dir, "ca.key.tmp"), privateKey, { mode: 0o600 });
  chmodSync(join(dir, "ca.key.tmp"), 0o600);
  renameSync(join(dir, "ca.key.tmp"), join(dir, "ca.key"));
  writeFileSync(join(dir, "ca.crt.tmp"), forge.pki.certificateToPem(cert), { mode: 0o644 });
  renameSync(join(dir, "ca.crt.tmp"), join(dir, "ca.crt"));
}

/** The CA of `dir` (made when missing). Throws when its files are unreadable or do not belong together. */
export function loadOrCreateCa(dir: string): EgressCa {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  if (!existsSync(join(dir, "ca.key")) || !existsSync(join(dir, "ca.crt"))) makeCaFiles(dir);
  chmodSync(join(dir, "ca.key"), 0o600);
  const keyPem = readFileSync(join(dir, "ca.key"), "utf8");
  const certPem = readFileSync(join(dir, "ca.crt"), "utf8");
  const x509 = new X509Certificate(certPem);
  if (!x509.checkPrivateKey(createPrivateKey(keyPem))) throw new Error(`the egress CA in ${dir}: ca.key is not the key of ca.crt (remove both to make a new CA)`);
  const caCert = forge.pki.certificateFromPem(certPem);
  const caKey = forge.pki.privateKeyFromPem(keyPem);
  const leafKeys = rsaPair();
  const leafPublic = forge.pki.publicKeyFromPem(leafKeys.publicKey);
  const cache = new Map<string, { ctx: tls.SecureContext; at: number }>();

  const leafPem = (name: string): string => {
    const cert = forge.pki.createCertificate();
    cert.publicKey = leafPublic;
    cert.serialNumber = serial();
    cert.validity.notBefore = new Date(Date.now() - 3600_000);
    cert.validity.notAfter = new Date(Date.now() + LEAF_DAYS * 24 * 3600_000);
    cert.setSubject([{ name: "commonName", value: name.slice(0, 64) }]);
    cert.setIssuer(caCert.subject.attributes);
    cert.setExtensions([
      { name: "basicConstraints", cA: false, critical: true },
      { name: "keyUsage", digitalSignature: true, keyEncipherment: true, critical: true },
      { name: "extKeyUsage", serverAuth: true },
      { name: "subjectAltName", altNames: [{ type: 2, value: name }] },
      { name: "authorityKeyIdentifier", keyIdentifier: caCert.generateSubjectKeyIdentifier().getBytes() },
    ]);
    cert.sign(caKey, forge.md.sha256.create());
    return forge.pki.certificateToPem(cert);
  };

  return {
    certPem,
    fingerprint: x509.fingerprint256,
    contextFor(name) {
      const n = name.toLowerCase();
      const kept = cache.get(n);
      if (kept && Date.now() - kept.at < LEAF_REFRESH_MS) return kept.ctx;
      const ctx = tls.createSecureContext({ key: leafKeys.privateKey, cert: leafPem(n) + certPem });
      cache.delete(n);
      cache.set(n, { ctx, at: Date.now() });
      if (cache.size > MAX_CACHED) cache.delete(cache.keys().next().value!);
      return ctx;
    },
  };
}
