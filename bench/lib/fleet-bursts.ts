// Creates per second in rounds of bursts (`npm run bench -- fleet`, part 3): each round runs one burst per
// variant, the order alternating between rounds, and counts where the fleet placed each burst's sandboxes.

/** One burst's rate (creates per second) and the sandboxes it made. */
export interface Burst {
  perSec: number;
  ids: string[];
}

export interface BurstRounds<C extends string> {
  /** Creates/s of each round, per variant. */
  rates: Record<C, number[]>;
  /** Sandboxes per node, per variant (only variants `nodeOf` answers for). */
  placed: Record<C, Record<string, number>>;
}

/**
 * `rounds` rounds over `variants` (reversed every other round): `prepare` readies a variant (cordons, full warm
 * pools), `burst` runs it, `nodeOf` says where a sandbox landed (undefined: not a fleet variant), `clear` kills
 * the burst's sandboxes before the next.
 */
export async function burstRounds<C extends string>(o: {
  variants: readonly C[];
  rounds: number;
  prepare(variant: C): Promise<void>;
  burst(variant: C): Promise<Burst>;
  nodeOf(variant: C, sandboxId: string): Promise<string | undefined>;
  clear(ids: string[]): Promise<void>;
}): Promise<BurstRounds<C>> {
  const rates = Object.fromEntries(o.variants.map((v) => [v, [] as number[]])) as Record<C, number[]>;
  const placed = Object.fromEntries(o.variants.map((v) => [v, {} as Record<string, number>])) as Record<C, Record<string, number>>;
  for (let r = 0; r < o.rounds; r++) {
    for (const variant of r % 2 === 0 ? o.variants : [...o.variants].reverse()) {
      await o.prepare(variant);
      const b = await o.burst(variant);
      rates[variant].push(b.perSec);
      for (const id of b.ids) {
        const node = await o.nodeOf(variant, id);
        const counts: Record<string, number> = placed[variant];
        if (node !== undefined) counts[node] = (counts[node] ?? 0) + 1;
      }
      await o.clear(b.ids);
    }
  }
  return { rates, placed };
}

/** `n1 49, n2 51`: where a variant's sandboxes went, by node name ("-" when nowhere counted). */
export function placedText(placed: Record<string, number>): string {
  const parts = Object.entries(placed)
    .sort()
    .map(([n, k]) => `${n} ${k}`);
  return parts.length ? parts.join(", ") : "-";
}

export const fmtRate = (v: number) => `${v.toFixed(2)}/s`;

/** `n` creates with `concurrency` in flight; its rate counts from the first call to the last one resolved. */
export async function burstOf(n: number, concurrency: number, createOne: () => Promise<string>): Promise<Burst> {
  const ids: string[] = [];
  let next = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (next < n) {
      next++;
      ids.push(await createOne());
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, worker));
  return { perSec: n / ((performance.now() - t0) / 1000), ids };
}

/** `fn` on every id, `concurrency` at a time. */
export async function eachInParallel(ids: readonly string[], concurrency: number, fn: (id: string) => Promise<void>): Promise<void> {
  let i = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (i < ids.length) await fn(ids[i++]!);
    }),
  );
}
