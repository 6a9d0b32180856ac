import type { Logger } from "pino";
import type { AuditLog } from "../audit/audit-log.js";
import type { EventBus } from "../events/bus.js";
import type { MetricsHistory } from "../metrics/history.js";
import type { SandboxManager } from "../manager/sandbox-manager.js";
import type { ControlPlaneMetrics } from "../metrics/metrics.js";
import type { Store } from "../store/store.js";
import type { SnapshotService } from "../snapshots/snapshot-service.js";
import type { TemplateService } from "../templates/template-service.js";
import type { TemplateFiles } from "../templates/uploads.js";
import type { VolumeService } from "../volumes/volume-service.js";
import type { SecretService } from "../secrets/secret-service.js";

/** What the API surfaces (REST, Connect, envd proxy) are built from. */
export interface ApiDeps {
  manager: SandboxManager;
  /** Snapshots and fork (absent: the API refuses them). */
  snapshots?: SnapshotService;
  /** Templates and their builds (absent: the template API answers that builds are not available). */
  templates?: TemplateService;
  /** Where the files of COPY steps are uploaded (with `templates`). */
  templateFiles?: TemplateFiles;
  store: Store;
  metrics: ControlPlaneMetrics;
  log: Logger;
  /** Sandbox domain: hosts `<port>-<sandboxId>.<domain>` are routed to sandboxes (a `:port` in it is ignored for routing). */
  domain: string;
  /**
   * The `domain` of sandboxes in API responses, from which the SDKs' getHost(port)
   * makes `<port>-<id>.<publicDomain>`: `--domain` as given, else `localhost:<port>`
   * (browsers and curl send *.localhost to the loopback address).
   */
  publicDomain: string;
  /** Events of every API (the Connect event stream's activity events). */
  events?: EventBus;
  /** Where REST and Connect requests are audited. */
  audit?: AuditLog;
  /** Metrics history (E2B's GET /sandboxes/{id}/metrics ranges). */
  history?: MetricsHistory;
  /** Volumes and their file API (absent: /volumes answers 404). */
  volumes?: VolumeService;
  /** E2B's secrets (absent: /secrets answers 404). */
  secrets?: SecretService;
}
