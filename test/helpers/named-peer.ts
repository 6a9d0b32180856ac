// A peer host (peer-host.ts) that also answers for host names: DNS on its
// first address (a test points LOCALE2B_DNS at it, so sandboxes and the
// egress proxy resolve with it), HTTPS on 8443 with a certificate of a test
// CA for the names, HTTP with the Host echoed on 8081 (named-servers.cjs).
// Records can be changed while it runs.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startPeerHost, type PeerHost } from "./peer-host.js";
import { makeTestCa } from "./test-ca.js";

export interface NamedPeer extends PeerHost {
  /** The DNS server's A records (name → address), replaced as a whole. */
  setRecords(records: Record<string, string>): void;
  records: Record<string, string>;
  /** The test CA's certificate (PEM file) the peer's HTTPS certificate is signed by. */
  caFile: string;
}

/** The servers' script: beside this file, or in the source tree when this runs from dist/ (the bench). */
const SERVERS = [join(import.meta.dirname, "named-servers.cjs"), join(import.meta.dirname, "../../../test/helpers/named-servers.cjs")].find((p) => existsSync(p))!;

/** The peer, with `names` in its certificate and `records(peer)` as its first answers (`range`: startPeerHost's). */
export async function startNamedPeer(names: string[], records: (p: PeerHost) => Record<string, string>, o: { range?: "public" | "private" } = {}): Promise<NamedPeer> {
  const dir = mkdtempSync(join(tmpdir(), "locale2b-named-peer-"));
  const ca = makeTestCa();
  const file = join(dir, "records.json");
  let peer: PeerHost;
  try {
    ca.issue(names, 1, join(dir, "cert.pem"), join(dir, "key.pem"));
    writeFileSync(file, "{}");
    peer = await startPeerHost({
      script: `require(${JSON.stringify(SERVERS)})`,
      env: { RECORDS: file, CERT: join(dir, "cert.pem"), KEY: join(dir, "key.pem") },
    }, o);
  } catch (err) {
    ca.remove();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const named: NamedPeer = {
    ...peer,
    records: {},
    caFile: ca.certFile,
    setRecords(r) {
      named.records = r;
      writeFileSync(file, JSON.stringify(r));
    },
    async close() {
      await peer.close();
      ca.remove();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  named.setRecords(records(peer));
  return named;
}

/** GET from this host, trusting the peer's certificate whatever its name. */
export function getInsecure(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    https
      .get(url, { rejectUnauthorized: false }, (res) => {
        let body = "";
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve(body));
      })
      .on("error", reject);
  });
}
