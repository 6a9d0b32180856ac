// Where pulls go: registry mirrors (a pull-through cache for docker.io, an
// air-gapped mirror for everything), plain HTTP only where listed, and AWS
// ECR's token exchange. Real registries on loopback (Debian's
// docker-registry); the one stand-in is FAKE ECR below, a local HTTP server
// in place of AWS's ECR API (AWS cannot be reached from here), which checks
// each request's SigV4 signature with its own code and hands out a token
// the real registry accepts.
import { createHash, createHmac } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ImagePullError, pullImage, type PullImageOptions } from "../../control-plane/images/oci/pull.js";
import { registrySettings, type RegistrySettings } from "../../control-plane/images/oci/registry-settings.js";
import { ensureTestTools, ImageBuilder, startRegistry, type TestRegistry } from "../helpers/oci-registry.js";

const missing = ensureTestTools();
const why = missing ? ` [skipped: ${missing}]` : "";

const log = pino({ level: "silent" });
const ALICE = { username: "alice", password: "alice-Pa55" };
const AWS_KEY = { awsAccessKeyId: "AKIDLOCALE2BTEST", awsSecretAccessKey: "wJalrXUtnFEMI/K7MDENG+locale2bSECRET", awsRegion: "eu-central-1" };
/** The password FAKE ECR's token carries: the registry knows it for user AWS, as ECR's registries do. */
const ECR_PASSWORD = "ecr-token-password-0123456789";

let dir = "";
let origin: TestRegistry; // htpasswd: alice, AWS
let mirror: TestRegistry; // open
let strictMirror: TestRegistry; // htpasswd: alice, same password: would let a pull in if credentials reached mirrors
let base: RegistrySettings;

const sha256 = (b: string | Buffer) => createHash("sha256").update(b).digest("hex");

/** FAKE ECR: the GetAuthorizationToken call, with SigV4 checked independently of control-plane/images/oci/sigv4.ts. */
interface FakeEcr {
  server: Server;
  url: string;
  requests: { target?: string; region?: string; service?: string; verdict: string }[];
}

function checkSigV4(req: IncomingMessage, body: Buffer): { verdict: string; region?: string; service?: string } {
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([a-f0-9]{64})$/.exec(req.headers.authorization ?? "");
  if (!m) return { verdict: "MissingAuthenticationTokenException" };
  const [, keyId, day, region, service, signed, signature] = m as unknown as string[];
  if (keyId !== AWS_KEY.awsAccessKeyId) return { verdict: "UnrecognizedClientException", region, service };
  const names = signed!.split(";");
  if (!names.includes("host") || !names.includes("x-amz-date") || !names.includes("x-amz-target")) return { verdict: "IncompleteSignatureException", region, service };
  const date = String(req.headers["x-amz-date"]);
  const canonical = [req.method, new URL(req.url!, "http://x").pathname, "", names.map((n) => `${n}:${String(req.headers[n]).trim()}\n`).join(""), signed, sha256(body)].join("\n");
  const toSign = ["AWS4-HMAC-SHA256", date, `${day}/${region}/${service}/aws4_request`, sha256(canonical)].join("\n");
  let k: Buffer = createHmac("sha256", `AWS4${AWS_KEY.awsSecretAccessKey}`).update(day!).digest();
  for (const part of [region!, service!, "aws4_request"]) k = createHmac("sha256", k).update(part).digest();
  const expected = createHmac("sha256", k).update(toSign).digest("hex");
  return { verdict: expected === signature && date.startsWith(day!) ? "ok" : "InvalidSignatureException", region, service };
}

async function startFakeEcr(registryHost: string): Promise<FakeEcr> {
  const fake: FakeEcr = { server: createServer(), url: "", requests: [] };
  fake.server.on("request", (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const { verdict, region, service } = checkSigV4(req, Buffer.concat(chunks));
      const target = req.headers["x-amz-target"] as string | undefined;
      fake.requests.push({ target, region, service, verdict });
      res.setHeader("content-type", "application/x-amz-json-1.1");
      if (verdict !== "ok" || service !== "ecr" || target !== "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken") {
        res.statusCode = 400;
        res.end(JSON.stringify({ __type: verdict === "ok" ? "InvalidAction" : verdict, message: "refused by FAKE ECR" }));
        return;
      }
      const token = Buffer.from(`AWS:${ECR_PASSWORD}`).toString("base64");
      res.end(JSON.stringify({ authorizationData: [{ authorizationToken: token, expiresAt: Date.now() / 1000 + 43200, proxyEndpoint: `https://${registryHost}` }] }));
    });
  });
  await new Promise<void>((resolve) => fake.server.listen(0, "127.0.0.1", resolve));
  fake.url = `http://127.0.0.1:${(fake.server.address() as { port: number }).port}`;
  return fake;
}

async function pullError(o: PullImageOptions): Promise<ImagePullError> {
  const err = await pullImage(o).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ImagePullError);
  return err as ImagePullError;
}

describe.skipIf(missing !== undefined)(`image pull sources: mirrors, plain HTTP, ECR${why}`, () => {
  let ecr: FakeEcr;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "locale2b-oci-sources-"));
    origin = await startRegistry(join(dir, "origin"), { [ALICE.username]: ALICE.password, AWS: ECR_PASSWORD });
    mirror = await startRegistry(join(dir, "mirror"));
    strictMirror = await startRegistry(join(dir, "strict-mirror"), { [ALICE.username]: ALICE.password });
    ecr = await startFakeEcr(origin.host);
    base = { mirrors: {}, mirrorsOnly: false, insecure: [origin.host, mirror.host, strictMirror.host], ecrEndpoint: ecr.url, maxBytes: 1024 ** 3, timeoutMs: 120_000 };
    const b = new ImageBuilder(join(dir, "layout"), join(dir, "work"));
    b.create("t").layer("t", (root) => {
      mkdirSync(join(root, "etc"));
      writeFileSync(join(root, "etc/origin"), "built by the test\n");
    });
    b.config("t", { env: ["PYTHON_VERSION=3.12.0"], workdir: "/srv", user: "1000:1000" });
    const creds = `${ALICE.username}:${ALICE.password}`;
    b.push("t", `${mirror.host}/library/python:3.12`) // docker.io's python:3.12, as a pull-through cache holds it
      .push("t", `${mirror.host}/dockerhub/library/python:3.12`) // ... and under a prefix (a Harbor proxy project)
      .push("t", `${mirror.host}/team/app:v1`) // an air-gapped copy of ghcr.io/team/app:v1
      .push("t", `${origin.host}/team/private:1`, creds)
      .push("t", `${strictMirror.host}/team/private:1`, creds);
  });

  afterAll(async () => {
    await Promise.all([origin?.stop(), mirror?.stop(), strictMirror?.stop()]);
    await new Promise((resolve) => ecr?.server.close(resolve));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const imagesDir = (name: string) => join(dir, "cache", name);

  it("a mirror for docker.io: python:3.12 comes from it, under its prefix too; docker.io is not asked", async () => {
    const settings = { ...base, mirrors: { "docker.io": [{ host: mirror.host, prefix: "" }] } };
    const r = await pullImage({ ref: "python:3.12", imagesDir: imagesDir("hub-mirror"), log, settings });
    expect(r.source).toBe(mirror.host);
    expect(r.config).toMatchObject({ env: { PYTHON_VERSION: "3.12.0" }, workdir: "/srv", user: "1000:1000" });
    await expect.poll(() => mirror.requests()).toContain("GET /v2/library/python/manifests/3.12");
    // The same from the environment, with a path prefix, mirror-only (what an air-gapped host sets).
    const env = registrySettings({ LOCALE2B_REGISTRY_MIRRORS: `docker.io=${mirror.host}/dockerhub`, LOCALE2B_REGISTRY_MIRRORS_ONLY: "1", LOCALE2B_INSECURE_REGISTRIES: "127.0.0.1" });
    const p = await pullImage({ ref: "docker.io/library/python:3.12", imagesDir: imagesDir("hub-prefix"), log, settings: env });
    expect(p.source).toBe(mirror.host);
    await expect.poll(() => mirror.requests()).toContain("GET /v2/dockerhub/library/python/manifests/3.12");
  });

  it("an air-gapped mirror for every registry (*): any ref resolves there; what it lacks is not found, naming it", async () => {
    const settings = { ...base, mirrors: { "*": [{ host: mirror.host, prefix: "" }] }, mirrorsOnly: true };
    const r = await pullImage({ ref: "ghcr.io/team/app:v1", imagesDir: imagesDir("star"), log, settings });
    expect(r.source).toBe(mirror.host);
    const err = await pullError({ ref: "ghcr.io/team/absent:1", imagesDir: imagesDir("star"), log, settings });
    expect(err.code).toBe("not_found");
    expect(err.message).toContain(`image ghcr.io/team/absent:1 not found in mirror ${mirror.host} (for ghcr.io)`);
  });

  it("a mirror that lacks the image, or refuses it: the registry itself next, and only it gets the credentials", async () => {
    const auth = { type: "registry", ...ALICE };
    // The open mirror has no team/private: not found there, then the origin.
    const viaOpen = await pullImage({ ref: `${origin.host}/team/private:1`, auth, imagesDir: imagesDir("fallback"), log, settings: { ...base, mirrors: { [origin.host]: [{ host: mirror.host, prefix: "" }] } } });
    expect(viaOpen.source).toBe(origin.host);
    await expect.poll(() => mirror.requests()).toContain("GET /v2/team/private/manifests/1");
    // The strict mirror has it and would take alice's password: that it answers 401 shows the password never went there.
    const viaStrict = await pullImage({ ref: `${origin.host}/team/private:1`, auth, imagesDir: imagesDir("fallback-strict"), log, settings: { ...base, mirrors: { [origin.host]: [{ host: strictMirror.host, prefix: "" }] } } });
    expect(viaStrict.source).toBe(origin.host);
    await expect.poll(() => strictMirror.requests()).toContain("GET /v2/team/private/manifests/1");
    // Mirror-only, the mirror's refusal is the answer, and the origin is not asked.
    const asked = origin.requests().length;
    const err = await pullError({ ref: `${origin.host}/team/private:1`, auth, imagesDir: imagesDir("strict-only"), log, settings: { ...base, mirrors: { [origin.host]: [{ host: strictMirror.host, prefix: "" }] }, mirrorsOnly: true } });
    expect(err.code).toBe("unauthorized");
    expect(err.message).toContain(`mirror ${strictMirror.host} (for ${origin.host}) refused access`);
    expect(origin.requests().length).toBe(asked);
  });

  it("plain HTTP only where configured: refused by default, saying which setting allows it", async () => {
    const err = await pullError({ ref: `${mirror.host}/team/app:v1`, imagesDir: imagesDir("insecure"), log, settings: { ...base, insecure: [] } });
    expect(err.code).toBe("insecure");
    expect(err.message).toBe(`registry ${mirror.host} answers only plain HTTP: list ${mirror.host} in LOCALE2B_INSECURE_REGISTRIES to allow it for image pulls`);
    const other = registrySettings({ LOCALE2B_INSECURE_REGISTRIES: "127.0.0.1:1,registry.internal" });
    expect((await pullError({ ref: `${mirror.host}/team/app:v1`, imagesDir: imagesDir("insecure"), log, settings: { ...other, ecrEndpoint: ecr.url } })).code).toBe("insecure");
    const allowed = registrySettings({ LOCALE2B_INSECURE_REGISTRIES: ` registry.internal, ${mirror.host} ` });
    expect((await pullImage({ ref: `${mirror.host}/team/app:v1`, imagesDir: imagesDir("insecure"), log, settings: allowed })).source).toBe(mirror.host);
  });

  it("AWS keys: the server asks (FAKE) ECR for a token with a valid SigV4 signature and pulls with it; no secret in the logs", async () => {
    const lines: string[] = [];
    const recording = pino({ level: "debug" }, { write: (l: string) => lines.push(l) });
    const before = ecr.requests.length;
    const r = await pullImage({ ref: `${origin.host}/team/private:1`, auth: { type: "aws", ...AWS_KEY }, imagesDir: imagesDir("ecr"), log: recording, settings: base });
    expect(r.source).toBe(origin.host);
    expect(ecr.requests.slice(before)).toEqual([{ target: "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken", region: "eu-central-1", service: "ecr", verdict: "ok" }]);
    const logged = lines.join("");
    expect(logged).toContain("pulling");
    for (const secret of [AWS_KEY.awsSecretAccessKey, ECR_PASSWORD, Buffer.from(`AWS:${ECR_PASSWORD}`).toString("base64")]) expect(logged).not.toContain(secret);
  });

  it("AWS keys refused, a bad region, ECR unreachable: errors that say what to fix, no registry asked", async () => {
    const asked = origin.requests().length;
    const ref = `${origin.host}/team/private:1`;
    const o = { ref, imagesDir: imagesDir("ecr-errors"), log, settings: base };
    const wrongSecret = await pullError({ ...o, auth: { type: "aws", ...AWS_KEY, awsSecretAccessKey: "not-the-secret" } });
    expect(wrongSecret.code).toBe("unauthorized");
    expect(wrongSecret.message).toBe(
      "AWS refused the access key for ECR in eu-central-1 (InvalidSignatureException: refused by FAKE ECR): check awsAccessKeyId, awsSecretAccessKey and that the key may call ecr:GetAuthorizationToken",
    );
    const unknownKey = await pullError({ ...o, auth: { type: "aws", ...AWS_KEY, awsAccessKeyId: "AKIDUNKNOWN" } });
    expect(unknownKey.message).toContain("UnrecognizedClientException");
    const region = await pullError({ ...o, auth: { type: "aws", ...AWS_KEY, awsRegion: "us-east-1.evil.example" } });
    expect(region.code).toBe("invalid");
    expect(region.message).toContain("is not an AWS region");
    const down = await pullError({ ...o, auth: { type: "aws", ...AWS_KEY }, settings: { ...base, ecrEndpoint: "http://127.0.0.1:9" } });
    expect(down.code).toBe("unreachable");
    expect(down.message).toContain("cannot reach the AWS ECR API at http://127.0.0.1:9");
    expect(origin.requests().length).toBe(asked);
  });
});
