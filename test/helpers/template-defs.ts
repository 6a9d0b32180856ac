// Shared by the template tests (test/rootfs/template*.test.ts): parsing a
// definition as if read from a file, its error text, and self-signed CA
// certificates for the build host's local CAs.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { expect } from "vitest";
import { findExecutable } from "../../control-plane/host/executables.js";
import { DefinitionError, parseDefinition } from "../../control-plane/images/template-definition.js";

/** The path definitions are parsed as coming from (error messages name it). */
export const F = "/defs/demo.yaml";
export const parse = (text: string, env: NodeJS.ProcessEnv = {}) => parseDefinition(text, F, env);

/** The DefinitionError `text` gets, as its message. */
export const err = (text: string) => {
  try {
    parse(text);
  } catch (e) {
    expect(e).toBeInstanceOf(DefinitionError);
    return (e as Error).message;
  }
  throw new Error("no error");
};

export const openssl = findExecutable("openssl");

/** A self-signed CA certificate (PEM) for `cn`, its key written into `dir` as `<cn>.key`. */
export function makeCert(dir: string, cn: string): string {
  const key = join(dir, `${cn}.key`);
  const r = spawnSync(openssl!, ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-subj", `/CN=${cn}`, "-days", "2"], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`openssl req: ${r.stderr}`);
  return r.stdout;
}
