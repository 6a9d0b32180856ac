// The certificate authority the egress proxy signs its per-host certificates
// with when it terminates TLS for a host with request rules (intercept.ts).
// Made once per data directory (`<data dir>/egress-ca/`: ca.key mode 0600 in
// a 0700 folder, ca.crt), kept on the host only: sandboxes get the
// certificate (trust-install.ts), never the key. X.509 is signed with
// node-forge (Node's crypto makes keys but cannot sign certificates); the
// keys are Node's (RSA 2048 for the CA, made natively). Leaf certificates
// carry one P-256 key for every host (as mitmproxy shares one key): an
// ECDSA handshake costs the proxy a fraction of an RSA one. forge only
// writes RSA keys into a certificate, so a leaf's to-be-signed part is
// forge's with the EC key put in, signed natively by the CA's key.
import { createPrivateKey, generateKeyPairSync, randomBytes, sign, X509Certificate } from "node:crypto";
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
  const caKey = createPrivateKey(keyPem);
  const leafKeys = generateKeyPairSync("ec", { namedCurve: "prime256v1", publicKeyEncoding: { type: "spki", format: "der" }, privateKeyEncoding: { type: "pkcs8", format: "pem" } });
  const leafSpki = forge.asn1.fromDer(forge.util.createBuffer(leafKeys.publicKey.toString("binary")));
  const cache = new Map<string, { ctx: tls.SecureContext; at: number }>();

  const leafPem = (name: string): string => {
    const cert = forge.pki.createCertificate();
    cert.publicKey = caCert.publicKey; // a stand-in: the EC key replaces it in the TBS below
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
    cert.siginfo.algorithmOid = forge.pki.oids.sha256WithRSAEncryption!;
    // forge builds the TBS for cert.sign(); its typings omit the function.
    const tbs = (forge.pki as unknown as { getTBSCertificate(c: forge.pki.Certificate): forge.asn1.Asn1 }).getTBSCertificate(cert);
    (tbs.value as forge.asn1.Asn1[])[6] = leafSpki; // subjectPublicKeyInfo (RFC 5280 §4.1)
    return signedPem(tbs, caKey);
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

const { asn1 } = forge;
const seq = (items: forge.asn1.Asn1[]) => asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, items);

/** A certificate of `tbs` signed sha256WithRSAEncryption by `key` (RFC 5280 §4.1.1), PEM. */
function signedPem(tbs: forge.asn1.Asn1, key: ReturnType<typeof createPrivateKey>): string {
  const tbsDer = Buffer.from(asn1.toDer(tbs).getBytes(), "binary");
  const signature = sign("sha256", tbsDer, key);
  const algorithm = seq([
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OID, false, asn1.oidToDer(forge.pki.oids.sha256WithRSAEncryption!).getBytes()),
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.NULL, false, ""),
  ]);
  const bits = asn1.create(asn1.Class.UNIVERSAL, asn1.Type.BITSTRING, false, "\0" + signature.toString("binary"));
  const der = Buffer.from(asn1.toDer(seq([tbs, algorithm, bits])).getBytes(), "binary");
  return `-----BEGIN CERTIFICATE-----\n${der.toString("base64").replace(/.{64}/g, "$&\n").replace(/\n?$/, "\n")}-----END CERTIFICATE-----\n`;
}
