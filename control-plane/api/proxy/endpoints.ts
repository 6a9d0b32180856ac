import type { SandboxManager } from "../../manager/sandbox-manager.js";
import type { Endpoint } from "../../transport/endpoint.js";

/** Where a running sandbox's traffic goes, and what the proxy checks on the way. */
export interface SandboxRoute {
  /** The sandbox's envd access token. */
  token: string;
  endpoint: Endpoint;
  /** Required on user-port requests (`e2b-traffic-access-token`) when the sandbox was made with allowPublicTraffic: false. */
  trafficToken: string | undefined;
  /** `network.maskRequestHost`: the Host user-port requests go on with (`${PORT}` unreplaced). */
  maskRequestHost: string | undefined;
  expires: number;
}

/**
 * manager.endpoint() results for running sandboxes, so that the proxy's hot
 * path does not read the store per request. Any lifecycle event of a
 * sandbox (paused, killed, resumed, …) drops its entry; entries also expire
 * after `ttlMs` as a safety net.
 */
export class EndpointCache {
  private readonly entries = new Map<string, SandboxRoute>();
  /** Bumped by every lifecycle event: a lookup that raced with one is not cached. */
  private generation = 0;

  constructor(
    private readonly manager: SandboxManager,
    private readonly ttlMs = 2_000,
  ) {
    manager.events.subscribe({}, (e) => {
      this.entries.delete(e.sandbox.id);
      this.generation++;
    });
  }

  /** The route to a running sandbox; throws the manager's not_found / unavailable errors. */
  async get(id: string): Promise<SandboxRoute> {
    const hit = this.entries.get(id);
    const now = Date.now();
    if (hit && hit.expires > now && this.manager.hasInstance(id)) return hit;
    const gen = this.generation;
    const { sandbox, endpoint } = await this.manager.endpoint(id);
    const trafficToken = sandbox.network?.allowPublicTraffic === false ? sandbox.trafficAccessToken : undefined;
    const maskRequestHost = sandbox.network?.maskRequestHost || undefined;
    const route = { token: sandbox.envdAccessToken, endpoint, trafficToken, maskRequestHost, expires: now + this.ttlMs };
    if (this.generation === gen) this.entries.set(id, route);
    return route;
  }
}
