import type { Logger } from "pino";
import type { AuditLog } from "../../audit/audit-log.js";
import type { AuditClaims } from "../../audit/claims.js";
import type { Redactor } from "../../audit/redact.js";
import type { EventSource } from "../../events/event-source.js";
import type { EnvdActivityWatchers } from "../../events/envd-watchers.js";
import type { SandboxManager } from "../../manager/sandbox-manager.js";
import type { MetricsHistory } from "../../metrics/history.js";
import type { SessionManager } from "../../sessions/session-manager.js";
import type { Store } from "../../store/store.js";
import type { EnvdRpc } from "../../transport/envd-rpc.js";
import type { Workspaces } from "../../workspace/workspaces.js";

/** Limits and defaults of the workspace API (serve's options). */
export interface WorkspaceSettings {
  /** Idle seconds before a workspace sandbox pauses (it resumes on the next call). */
  idleTimeoutSeconds: number;
  /** Largest file files/read and files/write move inside JSON (bigger: upload/download). */
  jsonFileBytes: number;
  /** Default cap of stdout and of stderr in a blocking exec's result. */
  execOutputBytes: number;
}

/** What the workspace API is built from: the same core as the E2B and Connect APIs. */
export interface WorkspaceDeps {
  manager: SandboxManager;
  store: Store;
  rpc: EnvdRpc;
  workspaces: Workspaces;
  sessions: SessionManager;
  /** What event streams and the event list read (one box: the bus; on Postgres: every host's events). */
  events: EventSource;
  watchers: EnvdActivityWatchers;
  audit: AuditLog;
  claims: AuditClaims;
  redactor: Redactor;
  history: MetricsHistory;
  settings: WorkspaceSettings;
  runtime: string;
  version: string;
  log: Logger;
}
