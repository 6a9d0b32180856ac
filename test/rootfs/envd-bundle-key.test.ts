// The envd bundle's cache key covers what goes into the bundle and nothing
// else: checked on a copy of the checkout (envd/, gen/, package.json, the
// lock file; node_modules of links to this one's, with the packages the test
// edits copied), by the key of the last build's record (what a cache hit
// computes) and by a fresh esbuild run.
import { appendFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleEnvd, ENVD_BUILD_OPTIONS, ensureEnvdBundle, envdBundleRecipe, recordedBundle } from "../../control-plane/images/envd-bundle.js";
import { bundleKey, type BundleInputs } from "../../control-plane/images/envd-bundle-inputs.js";
import { packageRoot } from "../../control-plane/runtimes/paths.js";

const ROOT = packageRoot();
/** Packages copied (not linked) into the copy's node_modules, so the test can edit them. */
const COPIED = ["pino", "@napi-rs/xattr"];

const scratch = mkdtempSync(join(tmpdir(), "locale2b-envd-key-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A copy of the checkout as far as the bundle goes, at scratch/<name>. */
function copyCheckout(name: string): string {
  const root = join(scratch, name);
  for (const p of ["envd", "gen", "package.json", "package-lock.json", "tsconfig.json"]) cpSync(join(ROOT, p), join(root, p), { recursive: true });
  const link = (rel: string) => {
    for (const e of readdirSync(join(ROOT, "node_modules", rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (COPIED.includes(p)) cpSync(join(ROOT, "node_modules", p), join(root, "node_modules", p), { recursive: true });
      else if (e.name.startsWith("@") && COPIED.some((c) => c.startsWith(`${p}/`))) link(p);
      else symlinkSync(join(ROOT, "node_modules", p), join(root, "node_modules", p));
    }
  };
  mkdirSync(join(root, "node_modules", "@napi-rs"), { recursive: true });
  link("");
  return root;
}

/** Edits a file of the copy for the length of fn, then puts it back. */
async function editing(file: string, edit: (text: string) => string, fn: () => Promise<void> | void): Promise<void> {
  const before = readFileSync(file, "utf8");
  writeFileSync(file, edit(before));
  try {
    await fn();
  } finally {
    writeFileSync(file, before);
  }
}

/** Adds files (path → content) to the copy for the length of fn, then removes `remove` (a file or folder added). */
async function adding(remove: string, files: Record<string, string>, fn: () => Promise<void> | void): Promise<void> {
  for (const [p, text] of Object.entries(files)) {
    mkdirSync(dirname(p), { recursive: true });
    writeFileSync(p, text);
  }
  try {
    await fn();
  } finally {
    rmSync(remove, { recursive: true, force: true });
  }
}

describe("the envd bundle's cache key", () => {
  let root: string;
  let inputs: BundleInputs;
  let loaded: Map<string, Buffer>;
  let key0: string;
  const recipe = envdBundleRecipe();
  /** The key a cache hit computes: the first build's record, the files as they are now. */
  const recordedKey = () => bundleKey(root, recipe, inputs);
  /** The key a build computes now: esbuild's record of this build. */
  const freshKey = async () => bundleKey(root, recipe, (await bundleEnvd(root)).inputs);

  beforeAll(async () => {
    root = copyCheckout("checkout");
    ({ inputs, loaded } = await bundleEnvd(root));
    key0 = bundleKey(root, recipe, inputs);
  });

  it("records envd's modules, the packages bundled and copied beside, and the places the resolver looked", () => {
    expect(inputs.files).toContain("envd/cli.ts");
    expect(inputs.files).toContain("gen/ts/process/process_pb.ts");
    expect(inputs.files.filter((f) => f.includes("controlplane"))).toEqual([]);
    expect(inputs.files.every((f) => f.startsWith("envd/") || f.startsWith("gen/ts/"))).toBe(true);
    // The key of a build hashes the bytes esbuild read, not the files as they are after it.
    expect([...loaded.keys()].map((p) => relative(root, p)).sort()).toEqual(inputs.files);
    expect(bundleKey(root, recipe, inputs, loaded)).toBe(key0);
    expect(inputs.packages).toEqual(expect.arrayContaining(["node_modules/pino", "node_modules/@napi-rs/xattr", "node_modules/pino/node_modules/sonic-boom"]));
    expect(inputs.packages.some((p) => p.endsWith("node_modules/esbuild"))).toBe(true);
    expect(inputs.packages.filter((p) => /(^|\/)node_modules\/(@e2b|vitest|yaml|typescript)(\/|$)/.test(p))).toEqual([]);
    expect(inputs.names).toContainEqual(["envd", "version"]);
    expect(inputs.manifests).toEqual(expect.arrayContaining(["package.json", "envd/package.json"]));
    expect(JSON.stringify(recipe)).toContain(process.version);
  });

  it("does not change for what is not in the bundle: control-plane protos, dependencies, the lock file, other packages", async () => {
    const controlPlaneProto = join(root, "gen", "ts", "locale2b", "controlplane", "v1", "sandbox_pb.ts");
    await editing(controlPlaneProto, (t) => `${t}\n// a comment in a control-plane message\nexport const extra = 1;\n`, async () => {
      expect(recordedKey()).toBe(key0);
      expect(await freshKey()).toBe(key0);
    });
    const pkg = join(root, "package.json");
    await editing(pkg, (t) => JSON.stringify({ ...JSON.parse(t), devDependencies: { ...JSON.parse(t).devDependencies, "left-pad": "1.3.0" }, scripts: {} }, null, 2), async () => {
      await editing(join(root, "package-lock.json"), (t) => t.replace('"packages": {', '"packages": {\n    "node_modules/left-pad": { "version": "1.3.0", "dev": true },'), async () => {
        const leftPad = join(root, "node_modules", "left-pad");
        await adding(leftPad, { [join(leftPad, "package.json")]: '{"name":"left-pad","version":"1.3.0"}', [join(leftPad, "index.js")]: "module.exports = 1;\n" }, async () => {
          expect(recordedKey()).toBe(key0);
          expect(await freshKey()).toBe(key0);
        });
      });
    });
    // A file beside envd's that no import of envd's can resolve to.
    await adding(join(root, "envd", "notes.md"), { [join(root, "envd", "notes.md")]: "notes\n" }, () => {
      expect(recordedKey()).toBe(key0);
    });
  });

  it("changes with envd's sources, a bundled or copied package's version, a module that would shadow one, the options", async () => {
    await editing(join(root, "envd", "version.ts"), (t) => `${t}\n// a comment\n`, () => {
      expect(recordedKey()).not.toBe(key0);
    });
    await editing(join(root, "gen", "ts", "process", "process_pb.ts"), (t) => `${t}\n// a comment\n`, () => {
      expect(recordedKey()).not.toBe(key0);
    });
    for (const p of COPIED) {
      const file = join(root, "node_modules", p, "package.json");
      await editing(file, (t) => JSON.stringify({ ...JSON.parse(t), version: "99.0.0" }), () => {
        expect(recordedKey(), p).not.toBe(key0);
      });
    }
    // envd imports "./version.js": esbuild takes a version.js over version.ts.
    await adding(join(root, "envd", "version.js"), { [join(root, "envd", "version.js")]: 'export const ENVD_VERSION = "9";\n' }, () => {
      expect(recordedKey()).not.toBe(key0);
    });
    // Another sonic-boom installed under pino (npm's answer to a version conflict) is the one pino gets.
    const nested = join(root, "node_modules", "pino", "node_modules", "sonic-boom");
    await adding(
      join(root, "node_modules", "pino", "node_modules"),
      {
        [join(nested, "package.json")]: '{"name":"sonic-boom","version":"9.9.9","main":"index.js"}',
        [join(nested, "index.js")]: "module.exports = class SonicBoom {};\n",
      },
      async () => {
        expect(recordedKey()).not.toBe(key0);
        const fresh = (await bundleEnvd(root)).inputs;
        expect(fresh.packages).toContain("node_modules/pino/node_modules/sonic-boom");
        expect(bundleKey(root, recipe, fresh)).not.toBe(key0);
      },
    );
    expect(recordedKey()).toBe(key0);
    expect(bundleKey(root, envdBundleRecipe({ ...ENVD_BUILD_OPTIONS, minifyWhitespace: false }), inputs)).not.toBe(key0);
    expect(bundleKey(root, envdBundleRecipe({ ...ENVD_BUILD_OPTIONS, target: "node22" }), inputs)).not.toBe(key0);
  });

  it("a cache hit hashes the last build's record: a control-plane proto edit keeps the bundle, an envd edit builds another", async () => {
    const images = join(scratch, "images");
    const first = await ensureEnvdBundle(images, { root });
    expect(first.cached).toBe(false);
    expect(readFileSync(join(first.dir, "inputs.json"), "utf8")).toContain('"envd/cli.ts"');
    await editing(join(root, "gen", "ts", "locale2b", "controlplane", "v1", "template_pb.ts"), (t) => `${t}\n// changed\n`, async () => {
      expect((await recordedBundle(images, root))?.hash16).toBe(first.hash16);
      const again = await ensureEnvdBundle(images, { root });
      expect(again).toMatchObject({ cached: true, hash16: first.hash16 });
    });
    appendFileSync(join(root, "envd", "version.ts"), "\n// changed\n");
    expect(await recordedBundle(images, root)).toBeUndefined();
    const second = await ensureEnvdBundle(images, { root });
    expect(second.cached).toBe(false);
    expect(second.hash16).not.toBe(first.hash16);
    expect((await recordedBundle(images, root))?.hash16).toBe(second.hash16);
  });
});
