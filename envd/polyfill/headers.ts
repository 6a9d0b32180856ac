/**
 * envd's own `Headers`, installed as the global one where envd runs as its
 * own process (the sandbox bundle, `locale2b envd`). connect-es builds every
 * call's headers and trailers with the global `Headers`; Node's is undici's,
 * and reaching for it loads all of undici (fetch, web streams, WebIDL): about
 * 8 MiB more resident memory in every sandbox from its first command on, and
 * WebIDL checks on each header. envd uses no fetch. This is the WHATWG
 * Headers behaviour that connect-es and envd rely on: case-insensitive
 * names, `append` joining values with ", ", `set-cookie` kept apart,
 * iteration sorted by name, invalid names and values refused with a
 * TypeError. test/envd/headers-polyfill.test.ts checks it against Node's.
 */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const EDGE_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;
const FORBIDDEN_IN_VALUE = /[\0\r\n]/;

function headerName(name: string): string {
  const n = String(name);
  if (!TOKEN.test(n)) throw new TypeError(`Headers: '${n}' is not a valid header name`);
  return n.toLowerCase();
}

const isEdgeSpace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/** `value` without the leading and trailing whitespace Headers strips (a regex only when there is some). */
function trimEdges(value: string): string {
  return value.length > 0 && (isEdgeSpace(value.charCodeAt(0)) || isEdgeSpace(value.charCodeAt(value.length - 1))) ? value.replace(EDGE_WHITESPACE, "") : value;
}

function headerValue(value: string): string {
  const v = trimEdges(String(value));
  if (FORBIDDEN_IN_VALUE.test(v)) throw new TypeError(`Headers: ${JSON.stringify(v)} is not a valid header value`);
  return v;
}

export class EnvdHeaders implements Headers {
  readonly #values = new Map<string, string>();
  #cookies: string[] = [];

  constructor(init?: ConstructorParameters<typeof Headers>[0]) {
    if (init === undefined || init === null) return;
    if (typeof init !== "object") throw new TypeError("Headers: the init must be an object, an array of pairs or Headers");
    if (init instanceof EnvdHeaders || (!(Symbol.iterator in init) && typeof (init as unknown as Headers).forEach === "function")) {
      (init as unknown as Headers).forEach((value, name) => this.append(name, value));
    } else if (Symbol.iterator in init) {
      for (const pair of init as Iterable<readonly string[]>) {
        if (pair.length !== 2) throw new TypeError("Headers: each header of the init must be a [name, value] pair");
        this.append(pair[0]!, pair[1]!);
      }
    } else {
      for (const name of Object.keys(init)) this.append(name, (init as Record<string, string>)[name]!);
    }
  }

  /**
   * Headers from Node's HTTP parser (`rawHeaders`: name, value, name, value…),
   * which has refused invalid names and values already: only lower-cased,
   * trimmed and joined (a request's headers are copied on every RPC).
   */
  static fromParsed(raw: readonly string[]): EnvdHeaders {
    const h = new EnvdHeaders();
    for (let i = 0; i + 1 < raw.length; i += 2) h.#add(raw[i]!.toLowerCase(), trimEdges(raw[i + 1]!));
    return h;
  }

  append(name: string, value: string): void {
    this.#add(headerName(name), headerValue(value));
  }

  #add(n: string, v: string): void {
    if (n === "set-cookie") this.#cookies.push(v);
    const old = this.#values.get(n);
    this.#values.set(n, old === undefined ? v : `${old}, ${v}`);
  }

  set(name: string, value: string): void {
    const n = headerName(name);
    const v = headerValue(value);
    if (n === "set-cookie") this.#cookies = [v];
    this.#values.set(n, v);
  }

  get(name: string): string | null {
    return this.#values.get(headerName(name)) ?? null;
  }

  has(name: string): boolean {
    return this.#values.has(headerName(name));
  }

  delete(name: string): void {
    const n = headerName(name);
    if (n === "set-cookie") this.#cookies = [];
    this.#values.delete(n);
  }

  getSetCookie(): string[] {
    return [...this.#cookies];
  }

  *entries(): IterableIterator<[string, string]> {
    for (const name of [...this.#values.keys()].sort()) {
      if (name === "set-cookie") for (const c of this.#cookies) yield [name, c];
      else yield [name, this.#values.get(name)!];
    }
  }

  *keys(): IterableIterator<string> {
    for (const [name] of this.entries()) yield name;
  }

  *values(): IterableIterator<string> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  forEach(callback: (value: string, name: string, parent: Headers) => void, thisArg?: unknown): void {
    for (const [name, value] of this.entries()) callback.call(thisArg, value, name, this);
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }
}

/**
 * A request's headers from Node's parser (`rawHeaders`) as a global
 * `Headers`: envd's own takes them as they are (EnvdHeaders.fromParsed),
 * any other (envd run inside another process) is given them one by one.
 */
export function headersFromParsed(raw: readonly string[]): Headers {
  if (Headers === (EnvdHeaders as unknown)) return EnvdHeaders.fromParsed(raw);
  const h = new Headers();
  for (let i = 0; i + 1 < raw.length; i += 2) h.append(raw[i]!, raw[i + 1]!);
  return h;
}

/** Makes EnvdHeaders the global `Headers` without ever touching Node's (reading it would load undici). */
export function installEnvdHeaders(): void {
  Object.defineProperty(globalThis, "Headers", { value: EnvdHeaders, writable: true, configurable: true, enumerable: false });
}
