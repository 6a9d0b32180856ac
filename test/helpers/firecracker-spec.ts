// Firecracker's API contract (../shared/firecracker/firecracker-swagger.yaml,
// Swagger 2.0) as a request validator: which (method, path) exist, and
// whether a JSON body is what that operation accepts. Used by the mock
// Firecracker (test/helpers/mock-firecracker.ts) on every request it serves,
// and by the tests to double-check what it recorded. Self-contained (node,
// ajv, yaml only): the mock runs it outside vitest.
import { Ajv, type ValidateFunction } from "ajv";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";

/** `$LOCALE2B_FIRECRACKER_SPEC`, else `shared/firecracker/firecracker-swagger.yaml` in the nearest ancestor that has it. */
export function findFirecrackerSpec(from = dirname(fileURLToPath(import.meta.url))): string {
  if (process.env.LOCALE2B_FIRECRACKER_SPEC) return process.env.LOCALE2B_FIRECRACKER_SPEC;
  let dir = from;
  for (;;) {
    const candidate = join(dir, "shared", "firecracker", "firecracker-swagger.yaml");
    if (existsSync(candidate)) return candidate;
    const parent = dirname(dir);
    if (parent === dir) return resolve("../shared/firecracker/firecracker-swagger.yaml");
    dir = parent;
  }
}

export interface Operation {
  method: string;
  /** The spec's path template, e.g. `/drives/{drive_id}`. */
  template: string;
  operationId: string;
  /** `#/definitions/X` of the body, when the operation takes one. */
  bodyRef?: string;
  bodyRequired: boolean;
}

export type Validation =
  | { ok: true; op: Operation; params: Record<string, string>; deprecated: string[] }
  | { ok: false; op?: Operation; params?: Record<string, string>; error: string };

interface SwaggerParam {
  in: string;
  name: string;
  required?: boolean;
  schema?: { $ref?: string };
}

/** Fields the spec marks deprecated (Firecracker still accepts them; we should not send them). */
const DEPRECATED: Record<string, string[]> = {
  SnapshotLoadParams: ["mem_file_path", "enable_diff_snapshots"],
  Vsock: ["vsock_id"],
  MachineConfiguration: ["cpu_template"],
};

/**
 * Firecracker deserializes request bodies with serde's `deny_unknown_fields`:
 * an unknown field is a 400. The swagger does not say so, so every object
 * definition that does not mention additionalProperties gets `false` here.
 */
function closeObjects(definitions: Record<string, Record<string, unknown>>): void {
  for (const def of Object.values(definitions)) {
    if (def.type === "object" && def.properties && def.additionalProperties === undefined) def.additionalProperties = false;
  }
}

export class FirecrackerSpec {
  readonly version: string;
  private readonly ops: { re: RegExp; names: string[]; template: string; methods: Map<string, Operation> }[] = [];
  private readonly ajv: Ajv;
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(readonly path: string) {
    const doc = parse(readFileSync(path, "utf8")) as {
      info: { version: string };
      paths: Record<string, Record<string, { operationId: string; parameters?: SwaggerParam[] }>>;
      definitions: Record<string, Record<string, unknown>>;
    };
    this.version = doc.info.version;
    closeObjects(doc.definitions);
    this.ajv = new Ajv({ strict: false, allErrors: true, logger: false, validateSchema: false });
    for (const f of ["int32", "int64"]) this.ajv.addFormat(f, { type: "number", validate: (n: number) => Number.isInteger(n) });
    this.ajv.addSchema({ definitions: doc.definitions }, "firecracker");
    for (const [template, methods] of Object.entries(doc.paths)) {
      const names: string[] = [];
      const re = new RegExp(
        `^${template.replace(/\{([^}]+)\}/g, (_m, name: string) => {
          names.push(name);
          return "([^/]+)";
        })}$`,
      );
      const map = new Map<string, Operation>();
      for (const [method, op] of Object.entries(methods)) {
        const body = op.parameters?.find((p) => p.in === "body");
        map.set(method.toUpperCase(), {
          method: method.toUpperCase(),
          template,
          operationId: op.operationId,
          bodyRef: body?.schema?.$ref,
          bodyRequired: body?.required === true,
        });
      }
      this.ops.push({ re, names, template, methods: map });
    }
  }

  /** Every operation, as `METHOD /template`. */
  operations(): string[] {
    return this.ops.flatMap((o) => [...o.methods.keys()].map((m) => `${m} ${o.template}`));
  }

  private validator(ref: string): ValidateFunction {
    let v = this.compiled.get(ref);
    if (!v) {
      v = this.ajv.compile({ $ref: `firecracker${ref}` });
      this.compiled.set(ref, v);
    }
    return v;
  }

  /** Checks one request: the path and method exist, and the body is what the operation takes. */
  validate(method: string, rawPath: string, body: unknown): Validation {
    const path = rawPath.split("?")[0]!;
    const entry = this.ops.find((o) => o.re.test(path));
    if (!entry) return { ok: false, error: `Invalid request method and/or path: ${method} ${path} (not in the API spec)` };
    const op = entry.methods.get(method.toUpperCase());
    if (!op) return { ok: false, error: `Invalid request method and/or path: ${method} ${path} (the spec has ${[...entry.methods.keys()].join(", ")})` };
    const m = entry.re.exec(path)!;
    const params: Record<string, string> = {};
    entry.names.forEach((n, i) => (params[n] = decodeURIComponent(m[i + 1]!)));
    if (!op.bodyRef) {
      if (body !== undefined) return { ok: false, op, params, error: `${op.operationId} takes no body` };
      return { ok: true, op, params, deprecated: [] };
    }
    if (body === undefined) {
      return op.bodyRequired ? { ok: false, op, params, error: `${op.operationId}: the request body is required` } : { ok: true, op, params, deprecated: [] };
    }
    const v = this.validator(op.bodyRef);
    if (!v(body)) {
      return { ok: false, op, params, error: `${op.operationId}: ${this.ajv.errorsText(v.errors, { separator: "; ", dataVar: "body" })}` };
    }
    const def = op.bodyRef.split("/").pop()!;
    const b = body as Record<string, unknown>;
    // Rules the spec states in words.
    if (def === "SnapshotLoadParams" && ("mem_backend" in b) === ("mem_file_path" in b)) {
      return { ok: false, op, params, error: "loadSnapshot: exactly one of mem_backend and mem_file_path must be present" };
    }
    for (const [param, field] of [["drive_id", "drive_id"], ["iface_id", "iface_id"], ["id", "id"]] as const) {
      if (params[param] !== undefined && b[field] !== params[param]) {
        return { ok: false, op, params, error: `${op.operationId}: the id from the path (${params[param]}) does not match the id from the body (${String(b[field])})` };
      }
    }
    const deprecated = (DEPRECATED[def] ?? []).filter((f) => f in b).map((f) => `${def}.${f}`);
    return { ok: true, op, params, deprecated };
  }
}
