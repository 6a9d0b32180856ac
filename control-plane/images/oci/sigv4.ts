// AWS Signature Version 4 for one request (header form), with node:crypto:
// the ECR token request needs nothing more, and the AWS SDK would be a large
// dependency for one POST. Checked against AWS's published test suite
// (test/images/oci-sigv4.test.ts).
import { createHash, createHmac } from "node:crypto";

export interface SigV4Key {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  service: string;
}

export interface SigV4Request {
  method: string;
  url: URL;
  /** Headers to sign besides host and x-amz-date (which are added). */
  headers?: Record<string, string>;
  body?: string | Buffer;
}

const sha256 = (data: string | Buffer) => createHash("sha256").update(data).digest("hex");
const hmac = (key: string | Buffer, data: string) => createHmac("sha256", key).update(data).digest();

/** `20150830T123600Z`. */
export function amzDate(now: Date): string {
  return now.toISOString().replace(/[-:]/g, "").replace(/\.\d{3}/, "");
}

/** RFC 3986 unreserved characters stay; everything else is %XX (encodeURIComponent leaves !'()* alone). */
function uriEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

export function canonicalQuery(url: URL): string {
  return [...url.searchParams]
    .map(([k, v]) => [uriEncode(k), uriEncode(v)] as const)
    .sort(([ak, av], [bk, bv]) => (ak < bk ? -1 : ak > bk ? 1 : av < bv ? -1 : av > bv ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
}

/**
 * The headers to send: the request's own, plus host, x-amz-date and
 * authorization. The path is used as URL keeps it (already percent-encoded
 * once, which is what services other than S3 sign).
 */
export function signV4(req: SigV4Request, key: SigV4Key, now = new Date()): Record<string, string> {
  const date = amzDate(now);
  const headers: Record<string, string> = { ...req.headers, host: req.url.host, "x-amz-date": date };
  const canonical = new Map<string, string>();
  for (const [name, value] of Object.entries(headers)) canonical.set(name.toLowerCase(), value.trim().replace(/\s+/g, " "));
  const names = [...canonical.keys()].sort();
  const signedHeaders = names.join(";");
  const canonicalRequest = [
    req.method.toUpperCase(),
    req.url.pathname || "/",
    canonicalQuery(req.url),
    names.map((n) => `${n}:${canonical.get(n)}\n`).join(""),
    signedHeaders,
    sha256(req.body ?? ""),
  ].join("\n");
  const scope = `${date.slice(0, 8)}/${key.region}/${key.service}/aws4_request`;
  const stringToSign = ["AWS4-HMAC-SHA256", date, scope, sha256(canonicalRequest)].join("\n");
  const signingKey = hmac(hmac(hmac(hmac(`AWS4${key.secretAccessKey}`, date.slice(0, 8)), key.region), key.service), "aws4_request");
  const signature = createHmac("sha256", signingKey).update(stringToSign).digest("hex");
  return { ...headers, authorization: `AWS4-HMAC-SHA256 Credential=${key.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}` };
}
