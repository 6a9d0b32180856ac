// A server's warm pools: `base`'s (serve's --warm-pool), and one for each
// other template created lately (LOCALE2B_TEMPLATE_WARM_POOL sandboxes each),
// made on the first create of that template and dropped when it has not been
// asked for in a while or when more templates want one than MAX_TEMPLATE_POOLS.
// A template's warm sandboxes have run its start command and passed its ready
// command already, so a create of it answers as soon as /init is done.
import type { Logger } from "pino";
import type { SandboxBoot } from "../domain/template.js";
import type { WarmPool, WarmShape } from "./warm-pool.js";

/** Templates other than `base` that keep warm sandboxes at once (each costs its sandboxes' memory). */
const MAX_TEMPLATE_POOLS = 4;
/** A template's pool goes after this long without a create of the template. */
const IDLE_MS = 30 * 60_000;

interface Entry {
  pool: WarmPool;
  usedAt: number;
}

export class WarmPools {
  private readonly pools = new Map<string, Entry>();
  private readonly sweep: NodeJS.Timeout;

  constructor(
    private readonly o: {
      /** `base`'s pool, if any. */
      base?: WarmPool;
      /** Sandboxes kept per other template (0: none). */
      perTemplate: number;
      make: (shape: WarmShape, boot: SandboxBoot, size: number) => WarmPool;
      log: Logger;
    },
  ) {
    if (o.base) this.pools.set("base", { pool: o.base, usedAt: Number.POSITIVE_INFINITY });
    this.sweep = setInterval(() => void this.dropIdle(), 60_000);
    this.sweep.unref();
  }

  /** The pool of an image, if it has one. */
  pool(image: string): WarmPool | undefined {
    const e = this.pools.get(image);
    if (e && e.usedAt !== Number.POSITIVE_INFINITY) e.usedAt = Date.now();
    return e?.pool;
  }

  /** A create of a template had no warm sandbox to take: the template gets a pool of its own for the next ones. */
  noteCold(shape: WarmShape, boot: SandboxBoot): void {
    if (this.o.perTemplate <= 0 || this.pools.has(shape.templateId)) return;
    const templates = [...this.pools.entries()].filter(([, e]) => e.usedAt !== Number.POSITIVE_INFINITY);
    if (templates.length >= MAX_TEMPLATE_POOLS) {
      const [oldest] = templates.sort((a, b) => a[1].usedAt - b[1].usedAt)[0]!;
      void this.drop(oldest);
    }
    const pool = this.o.make(shape, boot, this.o.perTemplate);
    this.pools.set(shape.templateId, { pool, usedAt: Date.now() });
    this.o.log.info({ image: shape.templateId, size: this.o.perTemplate }, "keeping warm sandboxes of a template");
    pool.fill();
  }

  /** Drops an image's pool (its template was deleted or rebuilt, or it is idle); its sandboxes are killed. */
  async drop(image: string): Promise<void> {
    const e = this.pools.get(image);
    if (!e || e.usedAt === Number.POSITIVE_INFINITY) return;
    this.pools.delete(image);
    await e.pool.close();
  }

  private async dropIdle(): Promise<void> {
    const now = Date.now();
    for (const [image, e] of this.pools) if (now - e.usedAt > IDLE_MS) await this.drop(image);
  }

  /** Each pool's image and state. */
  states(): { image: string; ready: number; starting: number; target: number }[] {
    return [...this.pools.entries()].map(([image, e]) => ({ image, ...e.pool.state }));
  }

  /** Ready sandboxes in every pool. */
  get count(): number {
    let n = 0;
    for (const e of this.pools.values()) n += e.pool.size;
    return n;
  }

  async close(): Promise<void> {
    clearInterval(this.sweep);
    await Promise.all([...this.pools.values()].map((e) => e.pool.close()));
    this.pools.clear();
  }
}
