// The build host's locally added CA certificates (Debian keeps them in
// /usr/local/share/ca-certificates; $LOCALE2B_IMAGE_CA_DIR picks another
// folder, or `none`), copied into every image so that sandboxes trust what the
// host trusts: a company CA, a TLS-intercepting proxy on the way out. Only
// certificates get in: each file is parsed and written back as the PEM of the
// certificates found in it, so a key kept beside them (or in the same file),
// or a link to any other host file, never reaches an image.
import { createHash, X509Certificate } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, posix } from "node:path";
import { setting } from "../settings.js";

/** Where Debian's update-ca-certificates finds locally added CAs, on the host and in the guest. */
export const LOCAL_CA_DIR = "/usr/local/share/ca-certificates";

/** Beyond these the folder is not a folder of CAs: stop reading. */
const MAX_FILES = 500;
const MAX_FILE_BYTES = 1024 * 1024;
const MAX_DEPTH = 4;

export interface LocalCA {
  /** Path under the CA folder (`corp.crt`, `proxy/egress.crt`); the same under LOCAL_CA_DIR in the guest. */
  path: string;
  /** The certificates of the file, re-encoded: nothing else of the file. */
  pem: string;
  sha256: string;
}

export interface LocalCAs {
  /** The folder read, or undefined when turned off. */
  dir?: string;
  cas: LocalCA[];
  /** `*.crt` files left out, with why (no certificate in them, unreadable, too large). */
  skipped: string[];
}

/** $LOCALE2B_IMAGE_CA_DIR: a folder, or `none` for no CAs; default LOCAL_CA_DIR. */
export function localCADir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const v = setting("LOCALE2B_IMAGE_CA_DIR", env);
  if (v === undefined) return LOCAL_CA_DIR;
  return v === "none" ? undefined : v;
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----/g;

/** The certificates in `text`, each parsed and re-encoded; empty when there is none. */
export function certificatesIn(text: string): string[] {
  const out: string[] = [];
  for (const block of text.match(PEM_CERT) ?? []) {
    try {
      out.push(new X509Certificate(block).toString());
    } catch {
      // not a certificate after all: left out
    }
  }
  return out;
}

/**
 * The `*.crt` files under `dir` (as update-ca-certificates finds them: any
 * depth, links followed), sorted by path. A missing folder is no CAs.
 */
export function readLocalCAs(dir: string | undefined): LocalCAs {
  const result: LocalCAs = { ...(dir ? { dir } : {}), cas: [], skipped: [] };
  if (!dir) return result;
  const visit = (rel: string, depth: number) => {
    let names: string[];
    try {
      names = readdirSync(join(dir, rel)).sort();
    } catch {
      return;
    }
    for (const name of names) {
      if (result.cas.length + result.skipped.length >= MAX_FILES) return;
      const path = rel ? posix.join(rel, name) : name;
      let st;
      try {
        st = statSync(join(dir, path));
      } catch {
        if (name.endsWith(".crt")) result.skipped.push(`${path}: a broken link`);
        continue;
      }
      if (st.isDirectory()) {
        if (depth < MAX_DEPTH) visit(path, depth + 1);
        continue;
      }
      if (!name.endsWith(".crt") || !st.isFile()) continue;
      if (st.size > MAX_FILE_BYTES) {
        result.skipped.push(`${path}: larger than ${MAX_FILE_BYTES} bytes`);
        continue;
      }
      let text: string;
      try {
        text = readFileSync(join(dir, path), "latin1");
      } catch (err) {
        result.skipped.push(`${path}: ${(err as NodeJS.ErrnoException).code ?? "unreadable"}`);
        continue;
      }
      const certs = certificatesIn(text);
      if (!certs.length) {
        result.skipped.push(`${path}: no PEM certificate in it`);
        continue;
      }
      const pem = certs.join("");
      result.cas.push({ path, pem, sha256: createHash("sha256").update(pem).digest("hex") });
    }
  };
  visit("", 0);
  return result;
}
