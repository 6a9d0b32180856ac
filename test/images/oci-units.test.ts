// The pure parts of image pulls: refs read as Docker reads them, the
// LOCALE2B_* registry settings, the order sources are tried in, the
// credential forms, and skopeo's errors read back.
import { describe, expect, it } from "vitest";
import { registryCredentials } from "../../control-plane/images/oci/auth.js";
import { classifySkopeoFailure, skopeoMessage } from "../../control-plane/images/oci/classify.js";
import { ecrEndpoint } from "../../control-plane/images/oci/ecr.js";
import { ImagePullError } from "../../control-plane/images/oci/errors.js";
import { imageConfig } from "../../control-plane/images/oci/image-config.js";
import { formatRef, parseImageRef } from "../../control-plane/images/oci/reference.js";
import { registrySettings } from "../../control-plane/images/oci/registry-settings.js";
import { pullSources } from "../../control-plane/images/oci/sources.js";
import { ToolFailed } from "../../control-plane/images/oci/tool-run.js";

const D = `sha256:${"ab".repeat(32)}`;

function thrown(fn: () => unknown): ImagePullError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ImagePullError);
    return err as ImagePullError;
  }
  throw new Error("did not throw");
}

describe("image refs", () => {
  it.each([
    ["python:3.12", "docker.io/library/python:3.12"],
    ["python", "docker.io/library/python:latest"],
    ["library/python:3.12-slim", "docker.io/library/python:3.12-slim"],
    ["index.docker.io/library/python", "docker.io/library/python:latest"],
    ["e2bdev/base", "docker.io/e2bdev/base:latest"],
    ["ghcr.io/owner/app:v1.2", "ghcr.io/owner/app:v1.2"],
    ["localhost/app", "localhost/app:latest"],
    ["localhost:5000/a/b/c:x", "localhost:5000/a/b/c:x"],
    ["127.0.0.1:5000/team/app", "127.0.0.1:5000/team/app:latest"],
    ["[::1]:5000/team/app:1", "[::1]:5000/team/app:1"],
    ["Registry.Example.com/a_b/c__d/e-f.g:T_1", "registry.example.com/a_b/c__d/e-f.g:T_1"],
    [`python@${D}`, `docker.io/library/python@${D}`],
    [`python:3.12@${D}`, `docker.io/library/python:3.12@${D}`],
    ["123456789012.dkr.ecr.eu-central-1.amazonaws.com/app:prod", "123456789012.dkr.ecr.eu-central-1.amazonaws.com/app:prod"],
  ])("%s → %s", (input, full) => {
    expect(formatRef(parseImageRef(input))).toBe(full);
  });

  it.each([
    ["", "it is empty"],
    ["python:3.12 ", undefined],
    ["py thon", "whitespace"],
    ["Python:3.12", "repository names must be lowercase"],
    ["python:", "tag \"\" is not valid"],
    ["python:-x", "tag \"-x\" is not valid"],
    [`python:${"t".repeat(129)}`, "at most 128"],
    ["python@sha256:abc", "is not sha256: followed by 64 lowercase hex digits"],
    [`python@md5:${"a".repeat(32)}`, "is not sha256:"],
    ["ghcr.io/", "no repository"],
    ["ghcr.io/Owner/app", "must be lowercase"],
    ["a//b", "not a valid repository path part"],
    ["-bad.example.com/x", "is not a host name"],
    [`${"a/".repeat(130)}b`, "longer than 255"],
    ["x/../../etc", "not a valid repository path part"],
  ])("refused: %j (%s)", (input, why) => {
    if (why === undefined) return expect(formatRef(parseImageRef(input))).toBe("docker.io/library/python:3.12");
    const err = thrown(() => parseImageRef(input));
    expect(err.code).toBe("invalid");
    expect(err.message).toContain(why);
  });
});

describe("registry settings", () => {
  it("defaults", () => {
    expect(registrySettings({})).toEqual({
      mirrors: {},
      mirrorsOnly: false,
      insecure: [],
      ecrEndpoint: "https://api.ecr.{region}.amazonaws.com",
      maxBytes: 20480 * 1024 * 1024,
      timeoutMs: 1_800_000,
    });
  });

  it("parses mirrors (in order, with prefixes), insecure hosts and the limits", () => {
    const s = registrySettings({
      LOCALE2B_REGISTRY_MIRRORS: "docker.io=mirror.gcr.io, docker.io=https://harbor.corp/dockerhub-proxy/, *=airgap:5000",
      LOCALE2B_REGISTRY_MIRRORS_ONLY: "1",
      LOCALE2B_INSECURE_REGISTRIES: "airgap:5000, http://10.0.0.7",
      LOCALE2B_IMAGE_PULL_MAX_MB: "512",
      LOCALE2B_IMAGE_PULL_TIMEOUT_S: "90",
    });
    expect(s.mirrors).toEqual({
      "docker.io": [
        { host: "mirror.gcr.io", prefix: "" },
        { host: "harbor.corp", prefix: "dockerhub-proxy" },
      ],
      "*": [{ host: "airgap:5000", prefix: "" }],
    });
    expect([s.mirrorsOnly, s.insecure, s.maxBytes, s.timeoutMs]).toEqual([true, ["airgap:5000", "10.0.0.7"], 512 * 1024 * 1024, 90_000]);
  });

  it.each([
    [{ LOCALE2B_REGISTRY_MIRRORS: "mirror.local" }, "LOCALE2B_REGISTRY_MIRRORS=\"mirror.local\": \"mirror.local\" is not REGISTRY=MIRROR"],
    [{ LOCALE2B_REGISTRY_MIRRORS: "docker.io=bad host" }, "is not a mirror host[:port]"],
    [{ LOCALE2B_INSECURE_REGISTRIES: "a b" }, "LOCALE2B_INSECURE_REGISTRIES"],
    [{ LOCALE2B_IMAGE_PULL_MAX_MB: "lots" }, "LOCALE2B_IMAGE_PULL_MAX_MB=\"lots\": must be a positive number"],
    [{ LOCALE2B_IMAGE_PULL_TIMEOUT_S: "-1" }, "LOCALE2B_IMAGE_PULL_TIMEOUT_S"],
    [{ LOCALE2B_REGISTRY_MIRRORS_ONLY: "yes" }, "must be 0 or 1"],
    [{ LOCALE2B_ECR_ENDPOINT: "api.ecr" }, "must be an http(s) URL"],
  ])("refuses %j", (env, message) => {
    expect(thrown(() => registrySettings(env)).message).toContain(message);
  });

  it("the ECR endpoint for a region (China's under amazonaws.com.cn)", () => {
    expect(ecrEndpoint("https://api.ecr.{region}.amazonaws.com", "eu-west-3").href).toBe("https://api.ecr.eu-west-3.amazonaws.com/");
    expect(ecrEndpoint("https://api.ecr.{region}.amazonaws.com", "cn-north-1").href).toBe("https://api.ecr.cn-north-1.amazonaws.com.cn/");
    expect(ecrEndpoint("http://127.0.0.1:4566", "us-east-1").href).toBe("http://127.0.0.1:4566/");
  });
});

describe("pull sources", () => {
  const mirrors = { "docker.io": [{ host: "m1:5000", prefix: "" }, { host: "harbor", prefix: "hub" }], "*": [{ host: "airgap", prefix: "" }] };

  it("the registry's mirrors in order, then the registry; `*` for the others; mirrors-only leaves the registry out", () => {
    const hub = parseImageRef("python:3.12");
    expect(pullSources(hub, { mirrors, mirrorsOnly: false, insecure: ["m1"] })).toEqual([
      { name: "m1:5000/library/python", host: "m1:5000", mirrorOf: "docker.io", insecure: true },
      { name: "harbor/hub/library/python", host: "harbor", mirrorOf: "docker.io", insecure: false },
      { name: "docker.io/library/python", host: "docker.io", insecure: false },
    ]);
    expect(pullSources(parseImageRef("ghcr.io/o/a"), { mirrors, mirrorsOnly: true, insecure: [] })).toEqual([{ name: "airgap/o/a", host: "airgap", mirrorOf: "ghcr.io", insecure: false }]);
    expect(pullSources(parseImageRef("ghcr.io/o/a"), { mirrors: {}, mirrorsOnly: true, insecure: ["ghcr.io:443"] })).toEqual([{ name: "ghcr.io/o/a", host: "ghcr.io", insecure: false }]);
  });
});

describe("credentials", () => {
  it("the three forms E2B's SDK sends (AWS: in oci-sources.test.ts, against FAKE ECR)", async () => {
    expect(await registryCredentials(undefined, "")).toBeUndefined();
    expect(await registryCredentials({ type: "registry", username: "u", password: "p:w" }, "")).toEqual({ username: "u", password: "p:w" });
    const json = JSON.stringify({ type: "service_account", private_key: "-----BEGIN PRIVATE KEY-----\n...\n" });
    expect(await registryCredentials({ type: "gcp", serviceAccountJson: json }, "")).toEqual({ username: "_json_key", password: json });
  });

  it.each([
    ["a string", "must be an object"],
    [{ type: "registry", username: "u" }, "needs password"],
    [{ type: "registry", username: "u:x", password: "p" }, "cannot contain ':'"],
    [{ type: "registry", username: "", password: "p" }, "needs username"],
    [{ type: "aws", awsAccessKeyId: "A", awsSecretAccessKey: "S" }, "needs awsRegion"],
    [{ type: "gcp", serviceAccountJson: "{not json" }, "is not a JSON object"],
    [{ type: "docker" }, 'type "docker" is not one of registry, aws, gcp'],
  ])("refuses %j", async (auth, message) => {
    const err = await registryCredentials(auth, "").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ImagePullError);
    expect((err as ImagePullError).code).toBe("invalid");
    expect((err as ImagePullError).message).toContain(message);
  });
});

describe("skopeo's errors, read back", () => {
  const src = { name: "r.example/team/app", host: "r.example", insecure: false };
  const failure = (msg: string) => new ToolFailed("skopeo", 1, `time="2026-01-01T00:00:00Z" level=fatal msg="${msg.replace(/"/g, '\\"')}"`);
  const c = { image: "r.example/team/app:v1", src, withCredentials: false };

  it("strips skopeo's wrapping", () => {
    expect(skopeoMessage(failure('Error parsing image name "docker://r.example/team/app:v1": reading manifest v1 in r.example/team/app: manifest unknown').tail)).toBe("reading manifest v1 in r.example/team/app: manifest unknown");
  });

  it.each([
    ["reading manifest v1 in r.example/team/app: manifest unknown: manifest unknown", "not_found", "image r.example/team/app:v1 not found in registry r.example"],
    ["reading manifest v1 in r.example/team/app: name unknown: repository name not known to registry", "not_found", "not found in registry r.example"],
    ["reading manifest v1 in r.example/team/app: unauthorized: authentication required", "unauthorized", "refused access to r.example/team/app:v1 without credentials"],
    ["reading manifest v1 in r.example/team/app: denied: requested access to the resource is denied", "unauthorized", "refused access"],
    ['pinging container registry r.example: Get "https://r.example/v2/": dial tcp: lookup r.example: no such host', "unreachable", "cannot reach registry r.example"],
    ['pinging container registry r.example: Get "https://r.example/v2/": http: server gave HTTP response to HTTPS client', "insecure", "LOCALE2B_INSECURE_REGISTRIES"],
    ['pinging container registry r.example: Get "https://r.example/v2/": x509: certificate signed by unknown authority', "insecure", "/etc/containers/certs.d/r.example/ca.crt"],
    ['choosing image instance: no image found in manifest list for architecture amd64, variant "", OS linux', "platform", "no linux/amd64 variant"],
    ["something else entirely", "failed", "pulling r.example/team/app:v1 from registry r.example failed: something else entirely"],
  ])("%s → %s", (msg, code, text) => {
    const err = classifySkopeoFailure(failure(msg), c);
    expect(err.code).toBe(code);
    expect(err.message).toContain(text);
  });

  it("with credentials, a refusal is about them", () => {
    expect(classifySkopeoFailure(failure("unauthorized: authentication required"), { ...c, withCredentials: true }).message).toContain("registry r.example refused the credentials for r.example/team/app:v1");
  });
});

describe("image config", () => {
  const cfg = (c: object) => Buffer.from(JSON.stringify({ os: "linux", architecture: "amd64", ...c }));

  it("ENV (later duplicates win), WORKDIR, USER, ENTRYPOINT, CMD; defaults when unset", () => {
    expect(imageConfig(cfg({ config: { Env: ["A=1", "B=x=y", "A=2", "NOEQUALS"], WorkingDir: "/w", User: "app:app", Entrypoint: ["/e"], Cmd: ["c", "d"] } }), "i")).toEqual({
      env: { A: "2", B: "x=y" },
      workdir: "/w",
      user: "app:app",
      entrypoint: ["/e"],
      cmd: ["c", "d"],
    });
    expect(imageConfig(cfg({}), "i")).toEqual({ env: {}, workdir: "/", user: "root", entrypoint: [], cmd: [] });
  });

  it("only linux/amd64", () => {
    expect(thrown(() => imageConfig(cfg({ architecture: "arm64", variant: "v8" }), "i")).message).toBe("image i is for linux/arm64/v8: only linux/amd64 images run here (pick the image's linux/amd64 tag or digest)");
  });
});
