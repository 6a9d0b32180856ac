// A certificate authority for TLS tests, made with the openssl command line
// in a temporary folder (as docs/tls.md does it by hand): a CA, and server
// certificates it signs for given names with a chosen serial number.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface TestCa {
  dir: string;
  /** The CA certificate (PEM file): what clients trust (NODE_EXTRA_CA_CERTS, or `ca` of an https agent). */
  certFile: string;
  cert: Buffer;
  /**
   * A server certificate for `names` (DNS names; IP addresses as `IP:1.2.3.4`)
   * with a fresh EC key, written to `certFile` and `keyFile` (key mode 0600)
   * each through a rename, as certbot and Kubernetes replace them.
   */
  issue(names: string[], serial: number, certFile: string, keyFile: string): void;
  remove(): void;
}

function openssl(args: string[], cwd: string): void {
  execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
}

export function makeTestCa(): TestCa {
  const dir = mkdtempSync(join(tmpdir(), "locale2b-test-ca-"));
  openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=locale2b test CA"], dir);
  const certFile = join(dir, "ca.crt");
  let n = 0;
  return {
    dir,
    certFile,
    cert: readFileSync(certFile),
    issue(names, serial, certOut, keyOut) {
      const base = join(dir, `leaf-${++n}`);
      const san = names.map((name) => (name.startsWith("IP:") ? name : `DNS:${name}`)).join(",");
      writeFileSync(`${base}.ext`, `subjectAltName=${san}\n`);
      openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", `${base}.key`, "-out", `${base}.csr`, "-subj", `/CN=${names[0]}`], dir);
      openssl(["x509", "-req", "-in", `${base}.csr`, "-CA", "ca.crt", "-CAkey", "ca.key", "-set_serial", String(serial), "-days", "2", "-extfile", `${base}.ext`, "-out", `${base}.crt`], dir);
      chmodSync(`${base}.key`, 0o600);
      renameSync(`${base}.key`, keyOut);
      renameSync(`${base}.crt`, certOut);
    },
    remove() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
