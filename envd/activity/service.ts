import type { ServiceImpl } from "@connectrpc/connect";
import type { ActivityService } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import type { EnvdContext } from "../context.js";
import { getCounters } from "./counters.js";
import { watchActivity } from "./watch.js";

/** locale2b.envd.v1.ActivityService: this sandbox's activity and I/O counters, for the control plane. */
export function createActivityService(ctx: EnvdContext): ServiceImpl<typeof ActivityService> {
  return {
    watchActivity: (req, hctx) => watchActivity(ctx.activity, req, hctx),
    getCounters: () => getCounters(),
  };
}
