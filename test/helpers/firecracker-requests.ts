// The mock Firecracker's request log (one JSON line per API request it
// served, see mock-firecracker.ts) and the checks the tests make on it.
import { existsSync, readFileSync } from "node:fs";
import { expect } from "vitest";
import type { FirecrackerSpec } from "./firecracker-spec.js";

export interface RecordedRequest {
  seq: number;
  pid: number;
  vmId: string;
  method: string;
  path: string;
  body?: Record<string, unknown>;
  status: number;
  fault?: string;
  valid: boolean;
  validation?: string;
  deprecated?: string[];
}

export function readRequests(logFile: string): RecordedRequest[] {
  if (!existsSync(logFile)) return [];
  return readFileSync(logFile, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as RecordedRequest);
}

/** `METHOD /path STATUS` per request, for exact sequence assertions. */
export function calls(recs: RecordedRequest[]): string[] {
  return recs.map((r) => `${r.method} ${r.path} ${r.status}`);
}

/** Each request passed the mock's validation, passes ours again, and uses no deprecated field. */
export function expectValid(spec: FirecrackerSpec, recs: RecordedRequest[]): void {
  expect(recs.length).toBeGreaterThan(0);
  for (const r of recs) {
    expect(r, `${r.method} ${r.path}: ${r.validation ?? ""}`).toMatchObject({ valid: true, deprecated: [] });
    const again = spec.validate(r.method, r.path, r.body);
    expect(again.ok, `${r.method} ${r.path}: ${again.ok ? "" : again.error}`).toBe(true);
  }
}
