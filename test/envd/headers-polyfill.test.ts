// envd's own Headers (envd/polyfill/headers.ts), the global one in every
// sandbox's envd, against Node's (undici's) on what connect-es and envd do
// with headers: the same answers, the same iteration, the same refusals.
import { describe, expect, it } from "vitest";
import { EnvdHeaders } from "../../envd/polyfill/headers.js";

type Op = [string, ...string[]];

function replay(H: typeof Headers, init: ConstructorParameters<typeof Headers>[0], ops: Op[]): unknown[] {
  const out: unknown[] = [];
  let h: Headers;
  try {
    h = new H(init);
  } catch (err) {
    return [`throws ${(err as Error).name}`];
  }
  for (const [op, ...args] of ops) {
    try {
      const r = (h as unknown as Record<string, (...a: string[]) => unknown>)[op]!(...args);
      out.push(op === "get" || op === "has" || op === "getSetCookie" ? r : "ok");
    } catch (err) {
      out.push(`throws ${(err as Error).name}`);
    }
  }
  const each: [string, string][] = [];
  h.forEach((v, k) => each.push([k, v]));
  out.push([...h], each, [...h.keys()], [...h.values()]);
  return out;
}

const CASES: { name: string; init?: ConstructorParameters<typeof Headers>[0]; ops: Op[] }[] = [
  { name: "empty", ops: [["get", "x"], ["has", "x"]] },
  { name: "case-insensitive names, sorted iteration", init: { "Content-Type": "application/json", Authorization: "Basic dXNlcjo=", "x-b": "2", "X-A": "1" }, ops: [["get", "content-type"], ["get", "AUTHORIZATION"], ["has", "x-a"]] },
  { name: "append joins, set replaces, delete removes", ops: [["append", "Accept", "a"], ["append", "accept", "b"], ["get", "ACCEPT"], ["set", "accept", "c"], ["get", "accept"], ["append", "x", "1"], ["delete", "X"], ["has", "x"]] },
  { name: "set-cookie apart", ops: [["append", "Set-Cookie", "a=1"], ["append", "set-cookie", "b=2"], ["get", "set-cookie"], ["getSetCookie"], ["set", "set-cookie", "c=3"], ["getSetCookie"]] },
  { name: "values trimmed of edge whitespace", ops: [["set", "x", "  v  "], ["get", "x"], ["append", "y", "\tz\n"], ["get", "y"]] },
  { name: "invalid names and values refused", ops: [["set", "bad name", "v"], ["append", "", "v"], ["set", "ok", "a\nb"], ["set", "ok", "a\0b"], ["get", "bad name"], ["set", "grpc-status-details-bin", "AAAA"]] },
  { name: "from pairs, repeated names", init: [["a", "1"], ["A", "2"], ["connect-timeout-ms", "60000"]], ops: [["get", "a"]] },
  { name: "from Headers", init: new Headers([["x", "1"], ["x", "2"], ["set-cookie", "s=1"], ["set-cookie", "t=2"]]), ops: [["getSetCookie"]] },
  { name: "a bad pair", init: [["a", "1", "extra"]] as unknown as [string, string][], ops: [] },
];

describe("envd's Headers behave as Node's", () => {
  for (const c of CASES) {
    it(c.name, () => {
      expect(replay(EnvdHeaders as unknown as typeof Headers, c.init, c.ops)).toEqual(replay(Headers, c.init, c.ops));
    });
  }

  it("a Headers of either kind builds the other (connect-es copies them both ways)", () => {
    const mine = new EnvdHeaders({ "content-type": "application/grpc", "grpc-status": "0" });
    expect([...new Headers(mine as unknown as Headers)]).toEqual([...mine]);
    expect([...new EnvdHeaders(new Headers({ B: "2", a: "1" }))]).toEqual([["a", "1"], ["b", "2"]]);
    expect(Object.prototype.toString.call(mine)).toBe("[object Headers]");
  });

  it("fromParsed (a request's rawHeaders from Node's parser) equals building them one by one", () => {
    const raw = ["Host", "x", "Content-Type", "application/connect+proto", "X-Dup", " a", "x-dup", "b\t", "Set-Cookie", "s=1", "set-cookie", "t=2", "Authorization", "Basic dXNlcjo=", "X-Nbsp", "\u00a0v\u00a0", "X-Empty", ""];
    const pairs: [string, string][] = [];
    for (let i = 0; i < raw.length; i += 2) pairs.push([raw[i]!, raw[i + 1]!]);
    const parsed = EnvdHeaders.fromParsed(raw);
    const ops: Op[] = [["get", "x-dup"], ["get", "X-NBSP"], ["get", "x-empty"], ["getSetCookie"], ["get", "authorization"]];
    expect(replay(EnvdHeaders as unknown as typeof Headers, parsed as unknown as Headers, ops)).toEqual(replay(Headers, pairs, ops));
  });
});
