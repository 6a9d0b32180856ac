import { requireAccessToken, type RouteHandler } from "./common.js";
import { sendJson } from "./json.js";

/** GET /envs: the env vars every process gets, as E2B's envd lists them (E2B_SANDBOX=true and /init's). */
export const handleEnvs: RouteHandler = async (ctx, req, res) => {
  requireAccessToken(ctx, req);
  sendJson(res, 200, ctx.state.processEnv());
};
