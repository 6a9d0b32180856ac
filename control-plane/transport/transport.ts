import type { Endpoint, PausePolicy } from "./endpoint.js";
import { LocalEndpoint } from "./local-endpoint.js";

/**
 * The endpoints of the sandboxes this control plane reaches, one per sandbox:
 * made when its instance is first used, retargeted when the instance behind
 * it changes, closed when the sandbox is gone.
 */
export class Transport {
  private readonly endpoints = new Map<string, LocalEndpoint>();

  /** The endpoint of a sandbox whose envd listens behind a local hybrid-vsock socket. */
  local(sandboxId: string, socketPath: string, policy?: PausePolicy): Endpoint {
    let ep = this.endpoints.get(sandboxId);
    if (!ep) {
      ep = new LocalEndpoint(sandboxId, socketPath, policy);
      this.endpoints.set(sandboxId, ep);
    } else {
      ep.retarget(socketPath, policy);
    }
    return ep;
  }

  /** The endpoint a sandbox has now, if any. */
  get(sandboxId: string): Endpoint | undefined {
    return this.endpoints.get(sandboxId);
  }

  /** A sandbox is gone (killed, dead, or its create failed): its connections close and its endpoint is forgotten. */
  forget(sandboxId: string): void {
    this.endpoints.get(sandboxId)?.close();
    this.endpoints.delete(sandboxId);
  }

  /** The control plane stops: every connection closes; traffic held for a stopped VM never reaches it. */
  destroy(): void {
    for (const ep of this.endpoints.values()) ep.abandon();
    this.endpoints.clear();
  }
}
