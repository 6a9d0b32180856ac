// E2B's `network.rules` as it enters (SandboxNetworkConfig.rules and
// SandboxNetworkUpdateConfig.rules): `{ "<host>": [ { transform: { headers:
// { "<name>": "<value>" } } } ] }`, what both SDKs send. Checked whole here,
// so that the egress proxy only ever meets rules it can apply: host keys are
// DNS names or one leading `*.` label (lowercased), header names are HTTP
// tokens the proxy may set, values carry no line break and only well-formed
// `${e2b.secrets.<name>}` placeholders. Any other field is refused by name.
import type { NetworkRule, NetworkRules } from "../../domain/network.js";
import { SECRET_NAME } from "../../domain/secret.js";
import { describe } from "./body.js";
import { HttpError } from "./errors.js";

const MAX_HOSTS = 256;
const MAX_RULES_PER_HOST = 32;
const MAX_HEADERS = 64;
const MAX_VALUE_BYTES = 8192;
const HOSTNAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;
/** RFC 9110 §5.6.2 token. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/**
 * Headers a rule may not set: they frame the message or the connection (the
 * proxy owns those), or name the host (the rule is chosen by it).
 */
const RESERVED = new Set(["host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer", "proxy-connection", "expect"]);
const OPEN = "${e2b.secrets.";
const PLACEHOLDER = /\$\{e2b\.secrets\.([^{}]*)\}/g;

const bad = (msg: string) => new HttpError(400, msg);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A rules key as the proxy matches it, or a 400 that says what a key may be. */
function hostKey(key: string): string {
  const k = key.trim().toLowerCase().replace(/\.$/, "");
  const where = `network.rules: key '${key}'`;
  if (k === "*") throw bad(`${where}: a bare '*' is not allowed; name a host ('api.example.com') or its subdomains ('*.example.com')`);
  const rest = k.startsWith("*.") ? k.slice(2) : k;
  if (/^\d+(\.\d+){3}(\/\d+)?$/.test(rest) || rest.includes(":")) {
    throw bad(`${where}: IP addresses and CIDR blocks are not supported as rule keys on this server; name the host (the TLS SNI / HTTP Host the client sends)`);
  }
  if (rest.includes("*")) throw bad(`${where}: a wildcard is one leading label, as in '*.example.com'`);
  if (!HOSTNAME.test(rest) || /^\d+(\.\d+)*$/.test(rest)) throw bad(`${where} is not a domain name ('api.example.com' or '*.example.com')`);
  return k;
}

function headerValue(v: unknown, where: string): string {
  if (typeof v !== "string") throw bad(`${where} must be a string, got ${describe(v)}`);
  if (/[\r\n\0]/.test(v)) throw bad(`${where} holds a line break or NUL, which a header cannot carry`);
  if (Buffer.byteLength(v) > MAX_VALUE_BYTES) throw bad(`${where} is longer than ${MAX_VALUE_BYTES} bytes`);
  const names = [...v.matchAll(PLACEHOLDER)].map((m) => m[1]!);
  if (v.split(OPEN).length - 1 !== names.length) throw bad(`${where} has a malformed secret placeholder: write it as \${e2b.secrets.<name>} (Secret.fill(name) makes one)`);
  for (const n of names) {
    if (!SECRET_NAME.test(n)) throw bad(`${where} has a secret placeholder with an invalid name '${n}': letters, digits, '_' and '-'`);
  }
  return v;
}

function rule(v: unknown, where: string): NetworkRule {
  if (!isObject(v)) throw bad(`${where} must be an object ({ transform: { headers: {...} } }), got ${describe(v)}`);
  for (const k of Object.keys(v)) if (k !== "transform") throw bad(`${where}: unknown field '${k}' (a rule has only 'transform')`);
  if (v.transform === undefined || v.transform === null) return {};
  const t = v.transform;
  if (!isObject(t)) throw bad(`${where}.transform must be an object ({ headers: {...} }), got ${describe(t)}`);
  for (const k of Object.keys(t)) if (k !== "headers") throw bad(`${where}.transform: unknown field '${k}' (a transform has only 'headers')`);
  if (t.headers === undefined || t.headers === null) return { transform: {} };
  if (!isObject(t.headers)) throw bad(`${where}.transform.headers must be an object of header name → value, got ${describe(t.headers)}`);
  const entries = Object.entries(t.headers);
  if (entries.length > MAX_HEADERS) throw bad(`${where}.transform.headers has ${entries.length} headers: at most ${MAX_HEADERS}`);
  const headers: Record<string, string> = {};
  for (const [name, value] of entries) {
    const at = `${where}.transform.headers['${name}']`;
    if (!TOKEN.test(name)) throw bad(`${at}: '${name}' is not a valid HTTP header name`);
    if (RESERVED.has(name.toLowerCase()) || name.toLowerCase().startsWith("proxy-")) throw bad(`${at}: the egress proxy does not let a rule set '${name}' (it frames the request or picks the host)`);
    headers[name] = headerValue(value, at);
  }
  return { transform: { headers } };
}

/** `network.rules` of a create or an update, checked; undefined when absent (null counts as absent). */
export function parseNetworkRules(v: unknown): NetworkRules | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw bad(`field 'network.rules' must be an object of host → list of rules, got ${describe(v)}`);
  const keys = Object.keys(v);
  if (keys.length > MAX_HOSTS) throw bad(`field 'network.rules' has ${keys.length} hosts: at most ${MAX_HOSTS}`);
  const out: NetworkRules = {};
  for (const key of keys) {
    const host = hostKey(key);
    if (host in out) throw bad(`network.rules: '${key}' is given twice (keys are compared lowercased)`);
    const list = v[key];
    if (!Array.isArray(list)) throw bad(`network.rules['${key}'] must be a list of rules, got ${describe(list)}`);
    if (list.length > MAX_RULES_PER_HOST) throw bad(`network.rules['${key}'] has ${list.length} rules: at most ${MAX_RULES_PER_HOST}`);
    out[host] = list.map((r, i) => rule(r, `network.rules['${key}'][${i}]`));
  }
  return out;
}
