import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { ActivityService, type PathChanged } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import type { Redactor } from "../audit/redact.js";
import type { SandboxManager } from "../manager/sandbox-manager.js";
import type { ActivityDb } from "../store/activity-db.js";
import type { EnvdRpc } from "../transport/envd-rpc.js";
import type { EventBus } from "./bus.js";
import { ActivityTranslator, watchedEvents } from "./envd-activity.js";
import type { SandboxEvent } from "./types.js";

interface Cursor {
  streamId: string;
  seq: number;
}

interface Watch {
  abort: AbortController;
  done: Promise<void>;
}

const MAX_BACKOFF_MS = 5_000;

/** How long after a create its watch opens (envd retains ACTIVITY_RETAINED events meanwhile). */
const CREATED_WATCH_DELAY_MS = 300;

/**
 * One WatchActivity stream per running sandbox, from its envd to the event
 * bus: this is how a command an E2B SDK runs through the proxy (or any
 * other client) becomes exec.* events, with no cost on the proxy's path.
 * Where it left off is stored with the events (envd_cursors), so after a
 * control-plane restart the watch resumes from there and envd replays what
 * happened meanwhile (as much as its ring still holds). Paused sandboxes
 * are not watched; their watch restarts when they resume.
 */
export class EnvdActivityWatchers {
  private readonly watches = new Map<string, Watch>();
  private unsubscribe: (() => void) | undefined;
  private closed = false;
  /** Tag → why the control plane ended that process (a workspace exec's timeout). */
  private readonly endReasons = new Map<string, string>();

  constructor(
    private readonly o: {
      manager: SandboxManager;
      rpc: EnvdRpc;
      db: ActivityDb;
      bus: EventBus;
      redactor: Redactor;
      /** A path removed, moved or made through envd's filesystem API (not an event: the audit log's). */
      onPathChanged?: (sandboxId: string, change: PathChanged) => void;
      log: Logger;
    },
  ) {}

  start(): void {
    this.unsubscribe = this.o.manager.events.subscribe({}, (e) => {
      if (e.type === "created") {
        // Not on the create's heels: the client's first command comes now, and envd keeps what
        // happens meanwhile for the watch to replay.
        setTimeout(() => this.watch(e.sandbox.id), CREATED_WATCH_DELAY_MS).unref();
      } else if (e.type === "resumed") {
        this.watch(e.sandbox.id);
      } else if (e.type === "killed") {
        this.stop(e.sandbox.id);
        this.o.db.write("DELETE FROM envd_cursors WHERE sandbox_id = ?", [e.sandbox.id]);
      }
    });
    for (const rec of this.o.manager.list({ states: ["running"] })) this.watch(rec.id);
  }

  /** Marks why a process was ended by the control plane (its exec.failed event says so). */
  noteEndReason(tag: string, reason: string): void {
    this.endReasons.set(tag, reason);
    setTimeout(() => this.endReasons.delete(tag), 60_000).unref();
  }

  private watch(id: string): void {
    if (this.closed || this.watches.has(id)) return;
    const abort = new AbortController();
    const done = this.run(id, abort.signal)
      .catch((err: unknown) => this.o.log.error({ err, sandboxId: id }, "watching the sandbox's activity failed"))
      .finally(() => {
        if (this.watches.get(id)?.abort === abort) this.watches.delete(id);
      });
    this.watches.set(id, { abort, done });
  }

  private stop(id: string): void {
    this.watches.get(id)?.abort.abort();
    this.watches.delete(id);
  }

  /** Closes a sandbox's watch (its connection closed) until the sandbox resumes; its cursor is kept. */
  async detach(id: string): Promise<void> {
    const w = this.watches.get(id);
    if (!w) return;
    this.watches.delete(id);
    w.abort.abort();
    await w.done;
  }

  private cursor(id: string): Cursor {
    this.o.db.flush();
    const row = this.o.db.get<{ stream_id: string; seq: number }>("SELECT stream_id, seq FROM envd_cursors WHERE sandbox_id = ?", [id]);
    return row ? { streamId: row.stream_id, seq: Number(row.seq) } : { streamId: "", seq: 0 };
  }

  private async run(id: string, signal: AbortSignal): Promise<void> {
    const log = this.o.log.child({ sandboxId: id });
    const translator = new ActivityTranslator(
      id,
      (text) => this.o.redactor.redact(text, id),
      (tag) => (tag ? this.endReasons.get(tag) : undefined),
    );
    const cursor = this.cursor(id);
    let backoff = 100;
    while (!signal.aborted) {
      const target = this.o.manager.runningEndpoint(id);
      if (!target) return; // paused or gone: a resume starts a new watch
      const client = this.o.rpc.client(ActivityService, { endpoint: target.endpoint, token: target.sandbox.envdAccessToken });
      try {
        for await (const msg of client.watchActivity({ streamId: cursor.streamId, afterSeq: BigInt(cursor.seq) }, { signal })) {
          backoff = 100;
          if (msg.streamId !== cursor.streamId) {
            if (cursor.streamId) log.info("the sandbox's envd restarted: its activity numbering began again");
            cursor.streamId = msg.streamId;
            cursor.seq = 0;
          }
          const events = watchedEvents(msg);
          if (events.length === 0) continue;
          if (msg.dropped > 0n) log.warn({ dropped: Number(msg.dropped) }, "envd no longer had some activity events: they are missing from the event stream");
          for (const e of events) {
            if (e.event.case === "pathChanged") this.o.onPathChanged?.(id, e.event.value);
            const event = translator.translate(e);
            if (event) this.o.bus.publish(this.withWorkspace(event, target.sandbox.metadata));
            cursor.seq = Number(e.seq);
          }
          // One upsert per sandbox per flush, whatever the number of events (two per command).
          this.o.db.writeLatest(`cursor:${id}`, "INSERT OR REPLACE INTO envd_cursors (sandbox_id, stream_id, seq) VALUES (?, ?, ?)", [id, cursor.streamId, cursor.seq]);
        }
      } catch (err) {
        if (signal.aborted) return;
        const ce = ConnectError.from(err);
        if (ce.code === Code.Unimplemented || ce.code === Code.NotFound) {
          log.info("this sandbox's envd has no activity service (an older image): no exec/file events from it");
          return;
        }
        if (!this.o.manager.runningEndpoint(id)) return;
        log.debug({ err: ce.message }, "activity watch interrupted: reconnecting");
      }
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
    }
  }

  private withWorkspace<T extends Partial<SandboxEvent>>(event: T, metadata: Record<string, string>): T {
    const ws = metadata["locale2b.workspace_id"];
    return ws ? { ...event, workspace_id: ws } : event;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.unsubscribe?.();
    const all = [...this.watches.values()];
    for (const w of all) w.abort.abort();
    await Promise.all(all.map((w) => w.done));
    this.watches.clear();
  }
}
