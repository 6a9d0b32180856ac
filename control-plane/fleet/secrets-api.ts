// A fleet's API replica serves E2B's /secrets itself, from the shared store:
// no node is involved, so any replica answers while any node is down. Every
// replica and node needs the same LOCALE2B_SECRETS_KEY (the store refuses
// another key).
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import { sendError, sendFailure } from "../api/rest/errors.js";
import { Router } from "../api/rest/router.js";
import { secretRoutes, type SecretHandler } from "../api/rest/secrets.js";
import type { SecretService } from "../secrets/secret-service.js";

export function isSecretsPath(path: string): boolean {
  return path === "/secrets" || path.startsWith("/secrets/");
}

/** The handler of /secrets requests whose API key the replica has checked. */
export function secretsApi(secrets: SecretService, log: Logger): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const router = new Router<SecretHandler>().add(...secretRoutes);
  return async (req, res) => {
    try {
      const url = new URL(req.url ?? "/", "http://localhost");
      const m = router.match(req.method ?? "GET", url.pathname);
      if (!m) return sendError(res, 404, `no route for ${req.method} ${url.pathname}`);
      if ("allowed" in m) return sendError(res, 405, `method ${req.method} is not allowed on ${url.pathname} (allowed: ${m.allowed.join(", ")})`, { allow: m.allowed.join(", ") });
      await m.handler({ req, res, params: m.params, query: url.searchParams, deps: { secrets } });
    } catch (err) {
      sendFailure(res, err, log);
    }
  };
}
