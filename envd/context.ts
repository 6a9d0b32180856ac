import type { ActivityLog } from "./activity/log.js";
import type { Logger } from "./log.js";
import type { EnvdState } from "./state.js";
import type { UserDb } from "./users.js";

/** What every envd service and HTTP route is built from. */
export interface EnvdContext {
  state: EnvdState;
  users: UserDb;
  log: Logger;
  /** Processes and file transfers, for the control plane (locale2b.envd.v1.ActivityService). */
  activity: ActivityLog;
}
