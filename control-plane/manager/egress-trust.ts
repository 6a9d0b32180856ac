// A sandbox with request rules (network.rules) trusts the egress proxy's CA
// (runtimes/net/egress-proxy/ca.ts): its certificate (never its key) is put
// in the sandbox's system store and the variables Python, Node, curl and git
// read point at that store. Done inside the sandbox, as root, through envd's
// process API, so it is the same on every runtime; the variables go through
// envd's default env (/init), so every process started later has them.
import type { EnvdRpc, EnvdTarget } from "../transport/envd-rpc.js";
import { runScript } from "../transport/envd-script.js";

/** The system store (Debian's, which the templates are): the CA is appended, once. */
export const SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";
/** The CA alone, where update-ca-certificates would look for it (and NODE_EXTRA_CA_CERTS reads it). */
export const CA_FILE = "/usr/local/share/ca-certificates/locale2b-egress-ca.crt";

/**
 * What a sandbox with rules gets in its default env: OpenSSL (Python's ssl,
 * curl, git) and requests read the full bundle, Node adds the CA to its own.
 */
export const TRUST_ENV: Readonly<Record<string, string>> = {
  SSL_CERT_FILE: SYSTEM_BUNDLE,
  REQUESTS_CA_BUNDLE: SYSTEM_BUNDLE,
  CURL_CA_BUNDLE: SYSTEM_BUNDLE,
  GIT_SSL_CAINFO: SYSTEM_BUNDLE,
  NODE_EXTRA_CA_CERTS: CA_FILE,
};

/**
 * $1: the CA certificate (PEM), $2: a line naming it (its fingerprint), to
 * add it once. The bundle is replaced through a rename (a reader never sees
 * half of it); a sandbox without a bundle gets one holding the CA alone.
 */
const SCRIPT = `
set -e
pem="$1"; mark="$2"
mkdir -p ${CA_FILE.slice(0, CA_FILE.lastIndexOf("/"))} ${SYSTEM_BUNDLE.slice(0, SYSTEM_BUNDLE.lastIndexOf("/"))}
printf '%s\\n' "$pem" > ${CA_FILE}.tmp && chmod 0644 ${CA_FILE}.tmp && mv -f ${CA_FILE}.tmp ${CA_FILE}
if [ -f ${SYSTEM_BUNDLE} ] && grep -qF "$mark" ${SYSTEM_BUNDLE}; then exit 0; fi
{ [ -f ${SYSTEM_BUNDLE} ] && cat ${SYSTEM_BUNDLE}; printf '%s\\n%s\\n' "$mark" "$pem"; } > ${SYSTEM_BUNDLE}.locale2b.tmp
chmod 0644 ${SYSTEM_BUNDLE}.locale2b.tmp && mv -f ${SYSTEM_BUNDLE}.locale2b.tmp ${SYSTEM_BUNDLE}
`;

/** Installs the CA in the sandbox's trust store; throws with the reason when it cannot (the create fails: its rules could not work). */
export async function installEgressCa(rpc: EnvdRpc, target: EnvdTarget, ca: { certPem: string; fingerprint: string }): Promise<void> {
  const r = await runScript(rpc, target, "root", "egress-ca", SCRIPT, [ca.certPem.trim(), `# locale2b egress CA ${ca.fingerprint}`]);
  if (r.code !== 0) throw new Error(`installing the egress proxy's CA in the sandbox failed (exit ${r.code}): ${r.stderr}`);
}
