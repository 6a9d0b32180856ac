// A collection of Kubernetes objects kept current the way client-go's
// informers keep theirs: one list, then a watch from the list's
// resourceVersion, each ADDED, MODIFIED or DELETED applied as it comes.
// The apiserver ends a watch after `timeoutSeconds` and the next one starts
// where it left off (its last event's or bookmark's resourceVersion); a
// resourceVersion too old to watch from (410 Gone) or a failed watch is
// followed by a fresh list. When watching is refused (a service account
// with `list` only), the collection is listed again every `relistMs`
// instead. API replicas keep the fleet's Leases and the cluster's Nodes so
// (kubernetes-nodes.ts): a cordon or a Lease renewal is seen when it
// happens, not at the next poll, and no replica lists 100 Nodes every 5 s.
import type { Logger } from "pino";
import { KubeError, kubeGet, kubeStream, type InCluster, type KubeStream } from "./kubernetes-client.js";

export interface KubeObject {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; labels?: Record<string, string> };
}

interface KubeList<T> {
  metadata?: { resourceVersion?: string };
  items?: T[];
}

interface KubeEvent<T> {
  type?: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  object?: T & { code?: number; message?: string };
}

export interface KubeCollectionOptions {
  cluster: InCluster;
  /** The collection's path, e.g. `/api/v1/nodes`. */
  path: string;
  /** Query parameters besides the watch's own, e.g. `labelSelector=...` (encoded). */
  query?: string;
  /** What it is, for logs and errors: "the cluster's Nodes". */
  what: string;
  log: Logger;
  /** Called after every change to the collection (a list, or an event). */
  onChange?: () => void;
  /** The wait before listing again after a failure, and the poll when watches are refused. */
  relistMs: number;
  /** How long the apiserver keeps one watch open (client-go picks 5-10 min; shorter finds a dead connection sooner). */
  watchSeconds?: number;
}

export interface KubeCollectionStats {
  /** Full lists made (the first, and one after each failed or expired watch). */
  lists: number;
  /** Watch events applied (ADDED, MODIFIED, DELETED). */
  events: number;
  /** Watches opened. */
  watches: number;
}

export class KubeCollection<T extends KubeObject> {
  /** The objects by name, as of the last list and the events since. */
  readonly items = new Map<string, T>();
  readonly stats: KubeCollectionStats = { lists: 0, events: 0, watches: 0 };
  /** Whether a list has filled `items` (false until the first one works). */
  synced = false;
  private resourceVersion = "";
  private listed = false;
  private stopped = false;
  private stream: KubeStream | undefined;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  private refused = false;

  constructor(private readonly o: KubeCollectionOptions) {}

  private url(extra: string): string {
    const q = [this.o.query, extra].filter(Boolean).join("&");
    return `${this.o.path}${q ? `?${q}` : ""}`;
  }

  private async list(): Promise<void> {
    const list = await kubeGet<KubeList<T>>(this.o.cluster, this.url(""), `list ${this.o.what}`);
    this.items.clear();
    for (const item of list.items ?? []) if (item.metadata?.name) this.items.set(item.metadata.name, item);
    this.resourceVersion = list.metadata?.resourceVersion ?? "";
    this.listed = true;
    this.synced = true;
    this.stats.lists++;
    this.o.onChange?.();
  }

  private apply(e: KubeEvent<T>): void {
    const obj = e.object;
    if (e.type === "ERROR") {
      // 410 Gone: the resourceVersion is older than the apiserver keeps; list again.
      throw new KubeError(`watch ${this.o.what}: ${obj?.code ?? "?"} ${obj?.message ?? "an ERROR event"}`, obj?.code ?? 0);
    }
    const rv = obj?.metadata?.resourceVersion;
    if (rv) this.resourceVersion = rv;
    if (e.type === "BOOKMARK") return;
    const name = obj?.metadata?.name;
    if (!name || !obj) return;
    if (e.type === "DELETED") this.items.delete(name);
    else this.items.set(name, obj);
    this.stats.events++;
    this.o.onChange?.();
  }

  private async watchOnce(): Promise<void> {
    const seconds = this.o.watchSeconds ?? 60;
    // The apiserver sends a bookmark about every minute and events as they happen; a connection silent for
    // the whole watch and then some is dead.
    const path = this.url(`watch=1&allowWatchBookmarks=true&timeoutSeconds=${seconds}&resourceVersion=${encodeURIComponent(this.resourceVersion)}`);
    let failure: unknown;
    this.stream = kubeStream(
      this.o.cluster,
      path,
      `watch ${this.o.what}`,
      (event) => {
        if (failure !== undefined) return;
        try {
          this.apply(event as KubeEvent<T>);
        } catch (err) {
          failure = err;
          this.stream?.close();
        }
      },
      (seconds + 30) * 1000,
    );
    this.stats.watches++;
    await this.stream.ended;
    this.stream = undefined;
    if (failure !== undefined) throw failure;
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      timer.unref();
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      try {
        if (!this.listed) await this.list();
        if (this.refused) {
          // Listing is all this account may do: list again after a while.
          await this.pause(this.o.relistMs);
          this.listed = false;
          continue;
        }
        try {
          await this.watchOnce();
        } catch (err) {
          if (err instanceof KubeError && err.status === 403) {
            this.refused = true;
            this.o.log.warn({ err }, `may not watch ${this.o.what}: listing them every ${this.o.relistMs / 1000} s instead (grant 'watch' as deploy/kubernetes/rbac.yaml does)`);
            continue;
          }
          throw err;
        }
        failures = 0;
      } catch (err) {
        if (this.stopped) break;
        this.listed = false;
        if (err instanceof KubeError && err.status === 410) continue; // too old to watch from: list again at once
        if (failures++ === 0) this.o.log.info({ err }, `${this.o.what}: ${(err as Error).message}; listing them again every ${this.o.relistMs / 1000} s until it works`);
        await this.pause(this.o.relistMs);
      }
    }
  }

  /** The first list, awaited (a failure is not thrown: the loop tries again), then the watch in the background. */
  async start(): Promise<void> {
    try {
      await this.list();
    } catch {
      // The loop lists again, and says why when that fails too.
    }
    this.loop = this.run();
  }

  /** No more lists or watches; resolves when the loop has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stream?.close();
    this.wake?.();
    await this.loop;
  }
}
