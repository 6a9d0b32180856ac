// E2B's network objects as the REST API parses them: wrong types are 400s
// that name the field, unsupported features are refused, and what is kept is
// typed (the record, getInfo and the proxy read it without casts).
import { describe, expect, it } from "vitest";
import { parseNetworkConfig, parseNetworkUpdate } from "../../control-plane/api/rest/network-body.js";
import { networkAfterUpdate } from "../../control-plane/manager/egress.js";

const fails = (fn: () => unknown): { status: number; message: string } => {
  try {
    fn();
  } catch (err) {
    return err as { status: number; message: string };
  }
  throw new Error("expected a refusal");
};

describe("network bodies (SandboxNetworkConfig, SandboxNetworkUpdateConfig)", () => {
  it("keeps the fields E2B's SDKs send, typed, and drops an empty mask and empty rules", () => {
    expect(parseNetworkConfig({ allowPublicTraffic: false, allowOut: ["1.2.3.4"], denyOut: ["0.0.0.0/0"], maskRequestHost: "localhost:${PORT}" }, true)).toEqual({
      allowPublicTraffic: false,
      allowOut: ["1.2.3.4"],
      denyOut: ["0.0.0.0/0"],
      maskRequestHost: "localhost:${PORT}",
    });
    expect(parseNetworkConfig({ maskRequestHost: "", rules: {}, egressProxy: null, allowOut: null }, false)).toEqual({});
  });

  it("refuses wrong types, unsupported features and an unsecured private sandbox with a 400 naming the field", () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ allowOut: "1.2.3.4" }, /'allowOut' must be an array/],
      [{ denyOut: ["1.2.3.4", 5] }, /'network.denyOut\[1\]' must be a string/],
      [{ allowPublicTraffic: "no" }, /'allowPublicTraffic' must be a boolean/],
      [{ allowPublicTraffic: false }, /needs a secured sandbox/],
      [{ maskRequestHost: 8080 }, /maskRequestHost must be a string/],
      [{ maskRequestHost: "a b" }, /is not a host name/],
      [{ egressProxy: { url: "http://p" } }, /egress proxies are not supported/],
      [{ rules: [] }, /'network.rules' must be an object/],
      [{ rules: { "-bad-.test": [{}] } }, /is not a domain name/],
      [{ rules: { "api.test": [{ transform: { headers: { "X-A": "a\r\nB: c" } } }] } }, /line break or NUL/],
      [{ rules: { "api.test": [{ transform: { headers: { "X-A": "${e2b.secrets.bad name}" } } }] } }, /invalid name 'bad name'/],
      [{ rules: { "api.test": [{ transform: { headers: { "Proxy-Authorization": "x" } } }] } }, /does not let a rule set/],
      [{ rules: { "api.test": [{ other: 1 }] } }, /unknown field 'other'/],
      [{ rules: { "API.test": [], "api.test": [] } }, /given twice/],
    ];
    for (const [body, message] of cases) {
      const err = fails(() => parseNetworkConfig(body, false));
      expect(err.status, JSON.stringify(body)).toBe(400);
      expect(err.message).toMatch(message);
    }
  });

  it("keeps network.rules as E2B's SDKs send them, keys lowercased, a rule without a transform kept", () => {
    const rules = { "API.Example.com": [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.openai-key}" } } }, {}], "*.example.org": [{ transform: { headers: {} } }] };
    expect(parseNetworkConfig({ rules }, false).rules).toEqual({
      "api.example.com": [{ transform: { headers: { Authorization: "Bearer ${e2b.secrets.openai-key}" } } }, {}],
      "*.example.org": [{ transform: { headers: {} } }],
    });
    expect(parseNetworkUpdate({ rules: null }).rules).toEqual({});
  });

  it("an update replaces the egress lists (an omitted one is cleared) and keeps the rest of the config", () => {
    const { rules, allowInternetAccess } = parseNetworkUpdate({ allowOut: ["10.0.0.1"], allow_internet_access: false });
    expect(allowInternetAccess).toBe(false);
    expect(networkAfterUpdate({ allowPublicTraffic: false, denyOut: ["1.1.1.1"], maskRequestHost: "h" }, rules)).toEqual({
      allowPublicTraffic: false,
      allowOut: ["10.0.0.1"],
      maskRequestHost: "h",
    });
    expect(parseNetworkUpdate({}).allowInternetAccess).toBe(true);
    // Rules too: given, they replace; omitted, they are cleared.
    const withRules = parseNetworkUpdate({ rules: { "a.test": [{ transform: { headers: { "X-A": "1" } } }] } }).rules;
    expect(networkAfterUpdate({ rules: { "b.test": [] } }, withRules).rules).toEqual({ "a.test": [{ transform: { headers: { "X-A": "1" } } }] });
    expect(networkAfterUpdate({ rules: { "b.test": [] } }, parseNetworkUpdate({}).rules).rules).toBeUndefined();
    expect(fails(() => parseNetworkUpdate({ denyOut: [1] })).status).toBe(400);
  });
});
