import type { Logger } from "pino";
import type { Instance } from "../runtimes/runtime.js";
import type { AgentPool } from "../transport/hybrid-vsock.js";

/**
 * The control plane stops while a VM whose vsock must stay quiet (qemu) is
 * paused with connections still open to it (a stream kept across the pause).
 * Closing them with the VM stopped would break its vsock for good (see
 * VsockGate), so run the VM for a moment, close them, and stop it again.
 */
export async function closeWhilePaused(id: string, inst: Instance | undefined, pool: AgentPool, log: Logger): Promise<void> {
  if (!inst?.quietVsockWhilePaused || pool.liveCount(id) === 0) return;
  try {
    await inst.resume();
    await pool.destroyLive(id);
    await inst.pause();
    log.info({ sandboxId: id }, "closed a paused VM's open connections while it ran for a moment");
  } catch (err) {
    log.warn({ err, sandboxId: id }, "closing a paused VM's connections before the control plane stops failed");
  }
}
