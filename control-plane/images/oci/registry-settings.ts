// What the host's operator configures for image pulls (LOCALE2B_* in
// settings.ts): registry mirrors, registries allowed over plain HTTP, the
// ECR endpoint, and the size and time limits. Parsed once per pull, with an
// error that names the variable when a value is wrong.
import { setting } from "../../settings.js";
import { ImagePullError } from "./errors.js";

export interface RegistryMirror {
  /** `127.0.0.1:5000`, `harbor.corp`. */
  host: string;
  /** A path the repository goes under at the mirror (`dockerhub-proxy` for harbor.corp/dockerhub-proxy), or "". */
  prefix: string;
}

export interface RegistrySettings {
  /** Mirrors by registry (`docker.io`, or `*` for every registry), tried in order before the registry itself. */
  mirrors: Record<string, RegistryMirror[]>;
  /** Never ask a registry that has a mirror (an air-gapped host). */
  mirrorsOnly: boolean;
  /** `host` or `host:port` reachable over plain HTTP or with an unverified certificate (a host alone: any port). */
  insecure: string[];
  /** The ECR API URL; `{region}` is replaced. */
  ecrEndpoint: string;
  /** Largest image accepted: its layers, compressed (checked before the download) and unpacked. */
  maxBytes: number;
  timeoutMs: number;
}

export const DEFAULT_ECR_ENDPOINT = "https://api.ecr.{region}.amazonaws.com";
const DEFAULT_MAX_MB = 20_480;
const DEFAULT_TIMEOUT_S = 1800;

const HOST = /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$/;

function bad(name: string, value: string, why: string): ImagePullError {
  return new ImagePullError("invalid", `${name}=${JSON.stringify(value)}: ${why}`);
}

function list(value: string | undefined): string[] {
  return (value ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

/** `docker.io=mirror.local:5000,*=airgap.corp/mirror`: REGISTRY=MIRROR[/PATH] pairs; a registry may repeat. */
export function parseMirrors(value: string | undefined, name = "LOCALE2B_REGISTRY_MIRRORS"): Record<string, RegistryMirror[]> {
  const out: Record<string, RegistryMirror[]> = {};
  for (const pair of list(value)) {
    const eq = pair.indexOf("=");
    const registry = eq === -1 ? "" : pair.slice(0, eq).trim().toLowerCase();
    const target = eq === -1 ? "" : pair.slice(eq + 1).trim().replace(/^https?:\/\//, "").replace(/\/+$/, "");
    if (!registry || !target) throw bad(name, value!, `${JSON.stringify(pair)} is not REGISTRY=MIRROR (e.g. docker.io=mirror.local:5000)`);
    if (registry !== "*" && !HOST.test(registry)) throw bad(name, value!, `${JSON.stringify(registry)} is not a registry host (or *)`);
    const slash = target.indexOf("/");
    const host = (slash === -1 ? target : target.slice(0, slash)).toLowerCase();
    const prefix = slash === -1 ? "" : target.slice(slash + 1);
    if (!HOST.test(host)) throw bad(name, value!, `${JSON.stringify(host)} is not a mirror host[:port]`);
    if (prefix && !/^[a-z0-9]+(?:[._/-]+[a-z0-9]+)*$/.test(prefix)) throw bad(name, value!, `${JSON.stringify(prefix)} is not a repository path`);
    (out[registry] ??= []).push({ host, prefix });
  }
  return out;
}

export function parseInsecure(value: string | undefined, name = "LOCALE2B_INSECURE_REGISTRIES"): string[] {
  const hosts = list(value).map((h) => h.replace(/^https?:\/\//, "").replace(/\/+$/, "").toLowerCase());
  for (const h of hosts) if (!HOST.test(h)) throw bad(name, value!, `${JSON.stringify(h)} is not host or host:port`);
  return hosts;
}

function positive(name: "LOCALE2B_IMAGE_PULL_MAX_MB" | "LOCALE2B_IMAGE_PULL_TIMEOUT_S", env: NodeJS.ProcessEnv, fallback: number): number {
  const v = setting(name, env);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw bad(name, v, "must be a positive number");
  return n;
}

/** The settings from the environment (LOCALE2B_REGISTRY_MIRRORS, ..., LOCALE2B_IMAGE_PULL_TIMEOUT_S). */
export function registrySettings(env: NodeJS.ProcessEnv = process.env): RegistrySettings {
  const ecr = setting("LOCALE2B_ECR_ENDPOINT", env) ?? DEFAULT_ECR_ENDPOINT;
  if (!/^https?:\/\/[^/\s]+/.test(ecr)) throw bad("LOCALE2B_ECR_ENDPOINT", ecr, "must be an http(s) URL");
  const mirrorsOnly = setting("LOCALE2B_REGISTRY_MIRRORS_ONLY", env);
  if (mirrorsOnly !== undefined && mirrorsOnly !== "0" && mirrorsOnly !== "1") throw bad("LOCALE2B_REGISTRY_MIRRORS_ONLY", mirrorsOnly, "must be 0 or 1");
  return {
    mirrors: parseMirrors(setting("LOCALE2B_REGISTRY_MIRRORS", env)),
    mirrorsOnly: mirrorsOnly === "1",
    insecure: parseInsecure(setting("LOCALE2B_INSECURE_REGISTRIES", env)),
    ecrEndpoint: ecr,
    maxBytes: Math.round(positive("LOCALE2B_IMAGE_PULL_MAX_MB", env, DEFAULT_MAX_MB) * 1024 * 1024),
    timeoutMs: Math.round(positive("LOCALE2B_IMAGE_PULL_TIMEOUT_S", env, DEFAULT_TIMEOUT_S) * 1000),
  };
}
