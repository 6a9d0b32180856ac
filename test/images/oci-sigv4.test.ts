// SigV4 (control-plane/images/oci/sigv4.ts) against AWS's published
// Signature Version 4 test suite (aws-sig-v4-test-suite: get-vanilla,
// get-vanilla-query-order-key-case, post-vanilla): key AKIDEXAMPLE, secret
// wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, us-east-1, service "service",
// 20150830T123600Z.
import { describe, expect, it } from "vitest";
import { amzDate, canonicalQuery, signV4 } from "../../control-plane/images/oci/sigv4.js";

const KEY = { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", region: "us-east-1", service: "service" };
const WHEN = new Date("2015-08-30T12:36:00Z");
const SCOPE = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=";

describe("SigV4 against AWS's test suite", () => {
  it("get-vanilla", () => {
    const h = signV4({ method: "GET", url: new URL("https://example.amazonaws.com/") }, KEY, WHEN);
    expect(h["x-amz-date"]).toBe("20150830T123600Z");
    expect(h.authorization).toBe(`${SCOPE}5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31`);
  });

  it("get-vanilla-query-order-key-case: the query is sorted before signing", () => {
    const h = signV4({ method: "GET", url: new URL("https://example.amazonaws.com/?Param2=value2&Param1=value1") }, KEY, WHEN);
    expect(h.authorization).toBe(`${SCOPE}b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500`);
  });

  it("post-vanilla: no body signs as the empty string's hash", () => {
    const h = signV4({ method: "POST", url: new URL("https://example.amazonaws.com/") }, KEY, WHEN);
    expect(h.authorization).toBe(`${SCOPE}5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b`);
  });

  it("signs every header it is given, lowercased and sorted, and a changed body changes the signature", () => {
    const req = { method: "POST", url: new URL("http://127.0.0.1:8080/"), headers: { "X-Amz-Target": "A.B", "Content-Type": "application/x-amz-json-1.1" }, body: "{}" };
    const a = signV4(req, { ...KEY, service: "ecr" }, WHEN);
    expect(a.authorization).toMatch(/SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=[a-f0-9]{64}$/);
    expect(a.host).toBe("127.0.0.1:8080");
    expect(signV4({ ...req, body: "{ }" }, { ...KEY, service: "ecr" }, WHEN).authorization).not.toBe(a.authorization);
  });

  it("helpers: the date form and RFC 3986 query encoding", () => {
    expect(amzDate(new Date("2024-01-02T03:04:05.678Z"))).toBe("20240102T030405Z");
    expect(canonicalQuery(new URL("https://x/?b=2&a=a b&A=(x)*!"))).toBe("A=%28x%29%2A%21&a=a%20b&b=2");
  });
});
