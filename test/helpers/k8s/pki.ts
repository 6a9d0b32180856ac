// The test cluster's certificates and keys, made with openssl (ECDSA P-256: quick to generate):
// a CA, the apiserver's serving certificate, one client certificate per component (its user and groups are
// what RBAC and the Node authorizer see), the service-account signing key pair; and the kubeconfigs.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import YAML from "yaml";
import { run } from "./host.js";

export interface Pki {
  dir: string;
  caCert: string;
  caKey: string;
}

export async function createCA(dir: string): Promise<Pki> {
  mkdirSync(dir, { recursive: true });
  const caKey = join(dir, "ca.key");
  const caCert = join(dir, "ca.crt");
  await run("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", caKey, "-out", caCert, "-days", "3650", "-subj", "/CN=locale2b-k8s-ca"]);
  return { dir, caCert, caKey };
}

export interface IssuedCert {
  cert: string;
  key: string;
}

/** A certificate signed by the CA: `cn` is the Kubernetes user, `orgs` its groups. */
export async function issue(pki: Pki, file: string, opts: { cn: string; orgs?: string[]; server?: { dns: string[]; ips: string[] }; client?: boolean }): Promise<IssuedCert> {
  const key = join(pki.dir, `${file}.key`);
  const csr = join(pki.dir, `${file}.csr`);
  const cert = join(pki.dir, `${file}.crt`);
  const ext = join(pki.dir, `${file}.ext`);
  const subject = [...(opts.orgs ?? []).map((o) => `/O=${o}`), `/CN=${opts.cn}`].join("");
  const usages = [...(opts.client !== false ? ["clientAuth"] : []), ...(opts.server ? ["serverAuth"] : [])];
  const lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment", `extendedKeyUsage=${usages.join(",")}`];
  if (opts.server) lines.push(`subjectAltName=${[...opts.server.dns.map((d) => `DNS:${d}`), ...opts.server.ips.map((i) => `IP:${i}`)].join(",")}`);
  writeFileSync(ext, lines.join("\n") + "\n");
  await run("openssl", ["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", csr, "-subj", subject]);
  const serial = "0x" + [...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, "0")).join("");
  await run("openssl", ["x509", "-req", "-in", csr, "-CA", pki.caCert, "-CAkey", pki.caKey, "-set_serial", serial, "-days", "3650", "-out", cert, "-extfile", ext]);
  return { cert, key };
}

/** The service-account token signing key pair (ES256). */
export async function serviceAccountKeys(pki: Pki): Promise<{ key: string; pub: string }> {
  const key = join(pki.dir, "sa.key");
  const pub = join(pki.dir, "sa.pub");
  await run("openssl", ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key]);
  await run("openssl", ["ec", "-in", key, "-pubout", "-out", pub]);
  return { key, pub };
}

/** A kubeconfig with the CA and the client certificate embedded (self-contained: copyable into a pod). */
export function writeKubeconfig(file: string, opts: { server: string; caCert: string; client: IssuedCert; user: string }): void {
  const b64 = (f: string) => readFileSync(f).toString("base64");
  const config = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "locale2b-k8s", cluster: { server: opts.server, "certificate-authority-data": b64(opts.caCert) } }],
    users: [{ name: opts.user, user: { "client-certificate-data": b64(opts.client.cert), "client-key-data": b64(opts.client.key) } }],
    contexts: [{ name: "locale2b-k8s", context: { cluster: "locale2b-k8s", user: opts.user } }],
    "current-context": "locale2b-k8s",
  };
  writeFileSync(file, YAML.stringify(config), { mode: 0o600 });
}
