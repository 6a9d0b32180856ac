// Every call the page makes: to /dashboard/session, and through the dashboard's gateway to the E2B REST
// API (/dashboard/api/e2b/…) and the workspace API (/dashboard/api/workspace/…). The session cookie goes
// with each call (HttpOnly: this code never sees it); the CSRF token lives in this module's memory only.

let csrfToken = "";
let signedOut: () => void = () => undefined;

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface SessionInfo {
  key_id: string;
  csrf_token: string;
  expires_at: string;
}

/** Called when any call answers 401 (the session ended, the key was revoked, the server restarted). */
export function onSignedOut(f: () => void): void {
  signedOut = f;
}

export const e2b = (path: string): string => `/dashboard/api/e2b${path}`;
export const ws = (path: string): string => `/dashboard/api/workspace${path}`;

export async function call<T = unknown>(method: string, url: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "GET" && method !== "HEAD") headers["x-csrf-token"] = csrfToken;
  const res = await fetch(url, { method, headers, credentials: "same-origin", ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  let data: unknown;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = text;
  }
  if (!res.ok) {
    if (res.status === 401 && !url.endsWith("/dashboard/session")) signedOut();
    const message = (data as { message?: string } | undefined)?.message ?? `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, message);
  }
  return data as T;
}

/** Uploads raw bytes (a file the user picked) with the CSRF token. */
export async function upload<T = unknown>(url: string, body: Blob): Promise<T> {
  const res = await fetch(url, { method: "POST", headers: { "x-csrf-token": csrfToken, "content-type": "application/octet-stream" }, credentials: "same-origin", body });
  const data = (await res.json().catch(() => undefined)) as (T & { message?: string }) | undefined;
  if (!res.ok) {
    if (res.status === 401) signedOut();
    throw new ApiError(res.status, data?.message ?? `${res.status} ${res.statusText}`);
  }
  return data as T;
}

/** The current session, or undefined when not signed in. */
export async function currentSession(): Promise<SessionInfo | undefined> {
  try {
    const s = await call<SessionInfo>("GET", "/dashboard/session");
    csrfToken = s.csrf_token;
    return s;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return undefined;
    throw err;
  }
}

export async function signIn(apiKey: string): Promise<SessionInfo> {
  const s = await call<SessionInfo>("POST", "/dashboard/session", { api_key: apiKey });
  csrfToken = s.csrf_token;
  return s;
}

export async function signOut(): Promise<void> {
  await call("DELETE", "/dashboard/session").catch(() => undefined);
  csrfToken = "";
}

/** A sandbox as the workspace API lists it (GET /sandboxes). */
export interface SandboxInfo {
  sandbox_id: string;
  status: "running" | "paused" | "stopped";
  state: string;
  template: string;
  /** The template as E2B names it. */
  template_id: string;
  runtime: string;
  memory_mb: number;
  vcpu_count: number;
  created_at: string;
  timeout_at: string;
}

/** A metrics sample as the workspace API gives it. */
export interface Sample {
  timestamp: string;
  cpu_percent: number;
  memory_used_bytes: number;
  memory_total_bytes: number;
  disk_used_bytes: number;
  disk_total_bytes: number;
}

/** The actions on a sandbox, through E2B's REST API. */
export const actions = {
  kill: (id: string) => call("DELETE", e2b(`/sandboxes/${id}`)),
  pause: (id: string) => call("POST", e2b(`/sandboxes/${id}/pause`)),
  /** Resumes a paused sandbox (E2B's connect), which then ends `timeout` seconds from now. */
  resume: (id: string, timeout = 300) => call("POST", e2b(`/sandboxes/${id}/connect`), { timeout }),
  setTimeout: (id: string, timeout: number) => call("POST", e2b(`/sandboxes/${id}/timeout`), { timeout }),
  /** A snapshot of the sandbox (memory too where the runtime can), as E2B's createSnapshot. */
  snapshot: (id: string) => call<{ snapshotID: string }>("POST", e2b(`/sandboxes/${id}/snapshots`), {}),
  /** A new sandbox from the sandbox as it is now, which ends `timeout` seconds from now. */
  fork: (id: string, timeout = 300) =>
    call<({ sandbox: { sandboxID: string } } | { error: { code: number; message: string } })[]>("POST", e2b(`/sandboxes/${id}/fork`), { timeout, count: 1 }),
};

/** An audit log entry (workspace GET /audit). */
export interface AuditEntry {
  id: number;
  time: string;
  actor: string;
  api: string;
  action: string;
  sandbox_id?: string;
  result: "ok" | "error";
  status?: number;
  message?: string;
  details?: Record<string, unknown>;
}

/** Audit entries (the route answers JSON Lines; call() parses a single line as JSON). */
export async function readAudit(query: string): Promise<AuditEntry[]> {
  const r = await call<string | AuditEntry>("GET", ws(`/audit?${query}`));
  return typeof r === "string" ? r.split("\n").filter(Boolean).map((l) => JSON.parse(l) as AuditEntry) : r ? [r] : [];
}
