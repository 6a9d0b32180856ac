// Where a pull looks for an image, in order: the registry's mirrors (or the
// `*` mirrors), then the registry itself unless mirrors-only. A mirror keeps
// the repository path (containerd's rule), under its own prefix if it has
// one: docker.io/library/python at mirror.local:5000 is
// mirror.local:5000/library/python.
import { refName, type ImageRef } from "./reference.js";
import type { RegistrySettings } from "./registry-settings.js";

export interface PullSource {
  /** `host/[prefix/]repository`, what follows docker:// (without the tag or digest). */
  name: string;
  /** The host connected to. */
  host: string;
  /** Set when this is a mirror: the registry it stands in for. */
  mirrorOf?: string;
  /** Plain HTTP (or an unverified certificate) allowed: listed in LOCALE2B_INSECURE_REGISTRIES. */
  insecure: boolean;
}

/** `host:port` → `host`; `[::1]:5000` → `[::1]`. */
function withoutPort(host: string): string {
  const m = /^(\[[^\]]+\]|[^:]+)(?::\d+)?$/.exec(host);
  return m ? m[1]! : host;
}

/** Listed exactly, or its host listed without a port (any port). */
export function isInsecure(host: string, insecure: string[]): boolean {
  return insecure.includes(host) || insecure.includes(withoutPort(host));
}

export function pullSources(ref: ImageRef, s: Pick<RegistrySettings, "mirrors" | "mirrorsOnly" | "insecure">): PullSource[] {
  const mirrors = s.mirrors[ref.registry] ?? s.mirrors["*"] ?? [];
  const out: PullSource[] = mirrors.map((m) => ({ name: refName(ref, m.host, m.prefix), host: m.host, mirrorOf: ref.registry, insecure: isInsecure(m.host, s.insecure) }));
  if (!(s.mirrorsOnly && mirrors.length)) out.push({ name: refName(ref), host: ref.registry, insecure: isInsecure(ref.registry, s.insecure) });
  return out;
}

/** "registry R" or "mirror M (for R)", as messages name a source. */
export function describeSource(src: PullSource): string {
  return src.mirrorOf ? `mirror ${src.host} (for ${src.mirrorOf})` : `registry ${src.host}`;
}
