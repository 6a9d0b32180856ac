// Image references as Docker reads them: `python:3.12` is
// docker.io/library/python:3.12, `ghcr.io/o/app@sha256:...` names a digest,
// no tag means `latest`. The grammar is distribution/reference's, so a ref
// that Docker accepts is accepted here and one it refuses is refused with
// the part that is wrong.
import { ImagePullError } from "./errors.js";

export interface ImageRef {
  /** `docker.io`, `ghcr.io`, `127.0.0.1:5000`, `[::1]:5000`: what the pull connects to. */
  registry: string;
  /** `library/python`, `o/app`. */
  repository: string;
  /** `3.12`; `latest` when neither a tag nor a digest was given. Kept beside a digest, which wins. */
  tag?: string;
  /** `sha256:` + 64 hex. */
  digest?: string;
}

export const DOCKER_HUB = "docker.io";

const DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN = new RegExp(`^(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:]+\\])(?::[0-9]{1,5})?$`);
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;
const NAME_MAX = 255;

function invalid(input: string, why: string): ImagePullError {
  return new ImagePullError("invalid", `bad image reference ${JSON.stringify(input)}: ${why} (expected e.g. python:3.12, ghcr.io/owner/app:v1 or name@sha256:<64 hex>)`);
}

/** Docker's rule: the first component is a registry when it has a `.` or `:`, is `localhost`, or has capitals. */
function splitRegistry(name: string): [registry: string, rest: string] {
  const slash = name.indexOf("/");
  if (slash === -1) return [DOCKER_HUB, name];
  const first = name.slice(0, slash);
  if (!/[.:]/.test(first) && first !== "localhost" && first.toLowerCase() === first) return [DOCKER_HUB, name];
  return [first === "index.docker.io" ? DOCKER_HUB : first.toLowerCase(), name.slice(slash + 1)];
}

export function parseImageRef(input: string): ImageRef {
  if (typeof input !== "string" || input.trim() === "") throw invalid(String(input), "it is empty");
  const s = input.trim();
  if (/[\s\0]/.test(s)) throw invalid(input, "it contains whitespace or NUL");
  let rest = s;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at !== -1) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw invalid(input, `digest ${JSON.stringify(digest)} is not sha256: followed by 64 lowercase hex digits`);
  }
  let tag: string | undefined;
  // A tag follows the last ':' that comes after the last '/' (a ':' before it is a registry port).
  const colon = rest.lastIndexOf(":");
  if (colon > rest.lastIndexOf("/")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw invalid(input, `tag ${JSON.stringify(tag)} is not valid (letters, digits, '_', '.', '-'; at most 128; not starting with '.' or '-')`);
  }
  if (rest === "") throw invalid(input, "it has no image name");
  if (rest.length > NAME_MAX) throw invalid(input, `the name is longer than ${NAME_MAX} characters`);
  const [registry, path] = splitRegistry(rest);
  if (!DOMAIN.test(registry)) throw invalid(input, `registry ${JSON.stringify(registry)} is not a host name, optionally with :port`);
  if (path === "") throw invalid(input, "it has no repository after the registry");
  for (const part of path.split("/")) {
    if (!PATH_COMPONENT.test(part)) {
      const hint = part.toLowerCase() !== part ? "repository names must be lowercase" : "each path part is lowercase letters and digits, separated by '.', '_', '__' or '-'";
      throw invalid(input, `${JSON.stringify(part)} is not a valid repository path part: ${hint}`);
    }
  }
  const repository = registry === DOCKER_HUB && !path.includes("/") ? `library/${path}` : path;
  return { registry, repository, ...(tag || !digest ? { tag: tag ?? "latest" } : {}), ...(digest ? { digest } : {}) };
}

/** `registry/repository`, with `prefix` (a mirror's path) between the two. */
export function refName(ref: ImageRef, registry = ref.registry, prefix = ""): string {
  return `${registry}/${prefix ? `${prefix}/` : ""}${ref.repository}`;
}

/** The full form: `docker.io/library/python:3.12`, `ghcr.io/o/app@sha256:...`. */
export function formatRef(ref: ImageRef): string {
  return `${refName(ref)}${ref.tag ? `:${ref.tag}` : ""}${ref.digest ? `@${ref.digest}` : ""}`;
}
