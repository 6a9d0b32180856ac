// AWS ECR credentials: the server itself asks ECR's GetAuthorizationToken
// (a SigV4-signed POST) for a registry password, as E2B does for
// `fromAWSRegistry`, so only the access key travels in the build request.
// The token is base64 `AWS:<password>`, valid for 12 hours; one is asked for
// per pull.
import { ImagePullError } from "./errors.js";
import { signV4 } from "./sigv4.js";
import type { Credentials } from "./auth.js";

export interface EcrKey {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
}

/** us-east-1, eu-central-1, us-gov-west-1, cn-north-1: the region becomes part of a host name, so nothing else passes. */
const REGION = /^[a-z]{2}(?:-[a-z]+)+-\d{1,2}$/;

/** The API URL for `region`: `template` with {region} replaced (AWS's China regions are under amazonaws.com.cn). */
export function ecrEndpoint(template: string, region: string): URL {
  const url = template.replace(/\{region\}/g, region);
  return new URL(region.startsWith("cn-") ? url.replace(/\.amazonaws\.com(?=[/:]|$)/, ".amazonaws.com.cn") : url);
}

interface TokenResponse {
  authorizationData?: { authorizationToken?: string; proxyEndpoint?: string }[];
  __type?: string;
  message?: string;
  Message?: string;
}

export async function ecrCredentials(key: EcrKey, endpointTemplate: string, signal?: AbortSignal): Promise<Credentials> {
  if (!REGION.test(key.region)) throw new ImagePullError("invalid", `awsRegion ${JSON.stringify(key.region)} is not an AWS region (e.g. us-east-1)`);
  const url = ecrEndpoint(endpointTemplate, key.region);
  const body = "{}";
  const headers = signV4(
    {
      method: "POST",
      url,
      headers: { "content-type": "application/x-amz-json-1.1", "x-amz-target": "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken" },
      body,
    },
    { accessKeyId: key.accessKeyId, secretAccessKey: key.secretAccessKey, region: key.region, service: "ecr" },
  );
  delete headers.host; // fetch sets it from the URL (the same value)
  let res: Response;
  try {
    res = await fetch(url, { method: "POST", headers, body, signal, redirect: "error" });
  } catch (err) {
    if (signal?.aborted) throw err;
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new ImagePullError("unreachable", `cannot reach the AWS ECR API at ${url.origin} for a registry token: ${cause?.code ?? cause?.message ?? (err as Error).message}`);
  }
  const text = await res.text();
  let data: TokenResponse = {};
  try {
    data = JSON.parse(text) as TokenResponse;
  } catch {
    // not JSON: described by the status below
  }
  if (!res.ok) {
    const what = [data.__type?.replace(/^.*#/, ""), data.message ?? data.Message].filter(Boolean).join(": ") || `HTTP ${res.status}`;
    const refused = res.status === 400 || res.status === 401 || res.status === 403;
    throw new ImagePullError(
      refused ? "unauthorized" : "failed",
      refused
        ? `AWS refused the access key for ECR in ${key.region} (${what}): check awsAccessKeyId, awsSecretAccessKey and that the key may call ecr:GetAuthorizationToken`
        : `the AWS ECR API at ${url.origin} answered ${what}`,
    );
  }
  const token = data.authorizationData?.[0]?.authorizationToken;
  const decoded = token ? Buffer.from(token, "base64").toString("utf8") : "";
  const colon = decoded.indexOf(":");
  if (colon <= 0) throw new ImagePullError("failed", `the AWS ECR API at ${url.origin} returned no usable authorization token`);
  return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}
