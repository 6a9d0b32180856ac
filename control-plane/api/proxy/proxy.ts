import type { IncomingMessage, ServerResponse } from "node:http";
import { ENVD_PORT } from "../../../envd/version.js";
import { SANDBOX_ID_RE } from "../../manager/ids.js";
import { ControlPlaneError } from "../../domain/errors.js";
import type { ApiDeps } from "../deps.js";
import { accessTokenOk, sandboxForSignedUrl, SIGNED_URL_STATES } from "./auth.js";
import { forwardHttp1 } from "./forward-http1.js";
import { isConnectPath, SANDBOX_NOT_FOUND, sendProxyError } from "./http.js";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Duplex } from "node:stream";
import { forwardH2 } from "./h2.js";
import { maskedHost } from "./mask-host.js";
import { EndpointCache, type SandboxRoute } from "./endpoints.js";
import { requestTarget, type Target } from "./target.js";
import { refuseUpgrade, tunnelUpgrade } from "./upgrade.js";

export interface EnvdProxy {
  /** True when the request is for a sandbox (routing headers, sandbox host, or a signed /files URL). */
  matches(req: IncomingMessage): boolean;
  handle(req: IncomingMessage, res: ServerResponse): void;
  /**
   * An HTTP/1.1 Upgrade request (WebSocket) for a sandbox: tunnelled to a
   * user port, else refused. False when the request is not for a sandbox.
   */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
}

type Resolved = { sandboxId: string; route: SandboxRoute };
/** `sandboxId`: answered in E2B's proxy shape (`{sandboxId, message, code}`). */
type Refused = { status: number; message: string; sandboxId?: string };

const notFound = (sandboxId: string): Refused => ({ status: 502, message: SANDBOX_NOT_FOUND, sandboxId });

/** A user port of a sandbox made with allowPublicTraffic: false needs its traffic token. */
function trafficAllowed(req: IncomingMessage, route: SandboxRoute): boolean {
  return route.trafficToken === undefined || req.headers["e2b-traffic-access-token"] === route.trafficToken;
}

const trafficRefusal = (sandboxId: string) => `sandbox ${sandboxId} only accepts traffic with its e2b-traffic-access-token header`;

/** envd paths only the control plane may call (E2B's `x-internal`, and /init, which sets the token). */
const INTERNAL = /^\/(init|freeze|unfreeze|collapse|fsfreeze|fsthaw|upgrade)(?:[/?]|$)/;


/**
 * The envd data plane on the control plane's port. A request is for a
 * sandbox when it carries `E2b-Sandbox-Id` (+ `E2b-Sandbox-Port`, as the SDKs
 * send with E2B_SANDBOX_URL), when its Host is `<port>-<id>.<domain>`, or
 * when it is a signed `GET/POST /files` URL (`sandbox.uploadUrl()` /
 * `downloadUrl()`), whose sandbox is the one whose token the signature was
 * made with. Requests are streamed both ways through the sandbox's pooled
 * vsock connections, with no buffering and no timeouts.
 *
 * Failures before envd answers are 502 (401 for a bad token or signature):
 * the SDKs read a 502 from the envd side as "sandbox not running" (JS
 * `isRunning()` → false; 502 → TimeoutError on /files, and as Connect code
 * `unavailable` → TimeoutError, or SandboxNotFoundError for `commands.run`).
 * A 404 would read as "file not found" / `unimplemented`, so it is not used.
 */
export function createEnvdProxy(deps: ApiDeps): EnvdProxy {
  const { metrics, manager } = deps;
  const hostSuffix = `.${deps.domain.toLowerCase()}`;
  const endpoints = new EndpointCache(manager);

  const target = (req: IncomingMessage): Target | undefined => requestTarget(req, hostSuffix);
  /** A sandbox killed (or being killed) after its request was routed: its failures read as E2B's "not found". */
  const gone = (sandboxId: string): boolean => manager.isGone(sandboxId);


  /** The sandbox and endpoint of a request, or the error to answer it with (before anything is forwarded). */
  const resolve = async (req: IncomingMessage, t: Target): Promise<Resolved | Refused> => {
    let sandboxId = t.sandboxId;
    if (sandboxId === undefined) {
      sandboxId = sandboxForSignedUrl(manager.list({ states: SIGNED_URL_STATES }), req);
      if (!sandboxId) return { status: 401, message: "invalid signature: it matches no running sandbox's file URL" };
    }
    if (!Number.isInteger(t.port) || t.port < 1 || t.port > 65535) {
      return { status: 502, message: `invalid port for sandbox ${sandboxId}: use <port>-<sandboxId>.<domain> with a port from 1 to 65535` };
    }
    if (!SANDBOX_ID_RE.test(sandboxId)) return notFound(sandboxId);
    if (INTERNAL.test(req.url ?? "")) return { status: 403, message: `${req.url?.split("?")[0]} is internal to the control plane` };
    try {
      return { sandboxId, route: await endpoints.get(sandboxId) };
    } catch (err) {
      if (err instanceof ControlPlaneError && err.kind === "not_found") return notFound(sandboxId);
      if (err instanceof ControlPlaneError && err.kind === "unavailable") return { status: 502, message: err.message };
      deps.log.error({ err, sandboxId }, "routing to a sandbox failed");
      return { status: 502, message: `routing to sandbox ${sandboxId} failed: ${(err as Error).message}` };
    }
  };

  const handle = async (req: IncomingMessage, res: ServerResponse, t: Target): Promise<void> => {
    const connect = isConnectPath(req.url);
    const signed = t.sandboxId === undefined;
    const r = await resolve(req, t);
    if ("status" in r) return sendProxyError(res, r.status, r.message, connect, r.sandboxId);
    const { sandboxId, route } = r;
    if (t.port !== ENVD_PORT) return forwardUserPort(req, res, sandboxId, t.port, route);
    // envd checks /health (no auth) and signed /files itself; everything else must carry the sandbox's token.
    if (!signed && req.method !== "OPTIONS" && !accessTokenOk(req, route.token)) {
      return sendProxyError(
        res,
        401,
        "unauthorized access, please provide a valid access token (X-Access-Token) for this sandbox",
        connect,
      );
    }
    if (req.httpVersionMajor === 2) {
      const fail = (err: Error) =>
        gone(sandboxId)
          ? sendProxyError(res, 502, SANDBOX_NOT_FOUND, connect, sandboxId)
          : sendProxyError(res, 502, `sandbox ${sandboxId} is not reachable (${err.message})`, connect);
      const session = await route.endpoint.h2().catch((err: Error) => err);
      if (session instanceof Error) return fail(session);
      return forwardH2(req as unknown as Http2ServerRequest, res as unknown as Http2ServerResponse, session, metrics, fail);
    }
    forwardHttp1(req, res, sandboxId, route.endpoint.agent(), metrics, { gone: () => gone(sandboxId) });
  };

  /**
   * A server the user runs in the sandbox (E2B's `getHost(port)`): HTTP/1.1
   * through the guest init's port forwarder, whether the client came over
   * HTTP/1.1 or HTTP/2 (as browsers and curl do on https://). Public, as on E2B, unless the
   * sandbox was created with allowPublicTraffic: false; with the sandbox's
   * maskRequestHost as Host when it has one.
   */
  const forwardUserPort = (req: IncomingMessage, res: ServerResponse, sandboxId: string, port: number, route: SandboxRoute): void => {
    if (!trafficAllowed(req, route)) return sendProxyError(res, 403, trafficRefusal(sandboxId), false);
    forwardHttp1(req, res, sandboxId, route.endpoint.agent(port), metrics, {
      describe: (err) => `sandbox ${sandboxId}: ${err.message}`,
      host: maskedHost(route.maskRequestHost, port),
      gone: () => gone(sandboxId),
    });
  };



  const upgrade = async (req: IncomingMessage, socket: Duplex, head: Buffer, t: Target): Promise<void> => {
    const r = await resolve(req, t);
    if ("status" in r) return refuseUpgrade(socket, r.status, r.message, r.sandboxId);
    const { sandboxId, route } = r;
    if (!trafficAllowed(req, route)) return refuseUpgrade(socket, 403, trafficRefusal(sandboxId));
    let upstream: Duplex;
    try {
      upstream = await route.endpoint.dial(t.port);
    } catch (err) {
      return refuseUpgrade(socket, 502, `sandbox ${sandboxId}: ${(err as Error).message}`);
    }
    if (socket.destroyed) return void upstream.destroy();
    tunnelUpgrade(req, socket, head, upstream, metrics, maskedHost(route.maskRequestHost, t.port));
  };

  return {
    upgrade(req, socket, head) {
      const t = target(req);
      // envd takes no upgrades: its requests are served as plain HTTP/1.1.
      if (!t || t.port === ENVD_PORT) return false;
      socket.on("error", () => socket.destroy());
      upgrade(req, socket, head, t).catch((err: unknown) => {
        deps.log.error({ err }, "envd proxy upgrade failed");
        refuseUpgrade(socket, 502, `proxy error: ${(err as Error).message}`);
      });
      return true;
    },
    matches: (req) => target(req) !== undefined,
    handle(req, res) {
      const t = target(req);
      if (!t) return sendProxyError(res, 502, "not a sandbox request", false);
      handle(req, res, t).catch((err: unknown) => {
        deps.log.error({ err }, "envd proxy failed");
        if (!res.headersSent) sendProxyError(res, 502, `proxy error: ${(err as Error).message}`, isConnectPath(req.url));
        else res.destroy();
      });
    },
  };
}
