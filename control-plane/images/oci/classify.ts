// What a failed skopeo run means, from its last words (containers/image's
// error strings, which carry the registry's error codes: MANIFEST_UNKNOWN,
// UNAUTHORIZED, DENIED, ...), turned into an error that says what to fix.
import { ImagePullError } from "./errors.js";
import { describeSource, type PullSource } from "./sources.js";
import type { ToolFailed } from "./tool-run.js";

export interface FailureContext {
  /** The image as the user wrote it. */
  image: string;
  src: PullSource;
  /** Credentials were sent (to this source). */
  withCredentials: boolean;
}

/** skopeo's `level=fatal msg="..."`, unescaped, without its "Error parsing image name ..." lead. */
export function skopeoMessage(tail: string): string {
  const lines = tail.split("\n").filter((l) => l.trim());
  const last = lines.findLast((l) => /level=(fatal|error)/.test(l)) ?? lines.at(-1) ?? "";
  const m = /msg="((?:[^"\\]|\\.)*)"/.exec(last);
  const msg = m ? m[1]!.replace(/\\(.)/g, "$1") : last;
  return msg.replace(/^Error parsing image name "[^"]*": /, "").replace(/^initializing source [^:]+(?::[^:]+)?: /, "").trim();
}

const NOT_FOUND = /manifest unknown|name unknown|not found|\b404\b/i;
const PLAIN_HTTP = /server gave HTTP response to HTTPS client/i;
const CERT = /x509:|certificate (?:is not|signed by unknown|has expired)|tls: failed to verify/i;
const REFUSED = /unauthorized|authentication required|\bdenied\b|invalid username\/password|\b40[13]\b/i;
const UNREACHABLE = /no such host|connection refused|i\/o timeout|network is unreachable|no route to host|connection reset|TLS handshake timeout|dial tcp|\bEOF\b|server misbehaving|temporary failure in name resolution/i;
const PLATFORM = /no image found in (?:manifest list|image index) for architecture/i;

export function classifySkopeoFailure(err: ToolFailed, c: FailureContext): ImagePullError {
  const why = skopeoMessage(err.tail);
  const where = describeSource(c.src);
  const host = c.src.host;
  if (PLATFORM.test(why)) return new ImagePullError("platform", `image ${c.image} has no linux/amd64 variant in ${where}: only linux/amd64 images run here`);
  if (PLAIN_HTTP.test(why)) return new ImagePullError("insecure", `${where} answers only plain HTTP: list ${host} in LOCALE2B_INSECURE_REGISTRIES to allow it for image pulls`);
  if (CERT.test(why)) return new ImagePullError("insecure", `${where}'s TLS certificate is not trusted (${why}): put its CA in /etc/containers/certs.d/${host}/ca.crt, or list ${host} in LOCALE2B_INSECURE_REGISTRIES`);
  if (/manifest unknown|name unknown/i.test(why) || (NOT_FOUND.test(why) && !REFUSED.test(why))) {
    return new ImagePullError("not_found", `image ${c.image} not found in ${where} (${why}): check the name and the tag or digest`);
  }
  if (REFUSED.test(why)) {
    return new ImagePullError(
      "unauthorized",
      c.withCredentials
        ? `${where} refused the credentials for ${c.image} (${why}): check the username and password (or key), and that they may pull this repository`
        : `${where} refused access to ${c.image} without credentials (${why}): the image is private (give fromImageRegistry credentials) or does not exist`,
    );
  }
  if (UNREACHABLE.test(why)) return new ImagePullError("unreachable", `cannot reach ${where} (${why}): check the registry's name and this host's network, or set a mirror (LOCALE2B_REGISTRY_MIRRORS)`);
  return new ImagePullError("failed", `pulling ${c.image} from ${where} failed: ${why || err.message}`);
}
