import type { OutputSpool } from "./output-spool.js";

/** What is kept about a background session (in the activity database, as JSON). */
export interface SessionRecord {
  sandbox_id: string;
  session_id: string;
  command: string;
  cwd: string;
  cols: number;
  rows: number;
  /** envd's pid of the session's process, once started. */
  pid?: number;
  running: boolean;
  /** -1 when killed by a signal; null while running, or when the end was never seen. */
  exit_code: number | null;
  /** Why it ended, when not by exiting (killed, signal, lost while the control plane was down). */
  error?: string;
  started_at: string;
  ended_at?: string;
  /** Where the next offset-less poll starts: everything before was handed out. */
  cursor: number;
  /** The API key id that started it (for the audit log). */
  key_id?: string;
}

/**
 * One background session: its record, its output on disk, and the readers
 * waiting for more (long polls, streams).
 */
export class Session {
  private waiters: (() => void)[] = [];
  /** The attachment to envd's stream runs (see SessionManager.attach). */
  attached = false;
  /** Set when the session is being killed through the API (its end says so). */
  killRequested = false;
  /** Detached for a pause (nothing runs meanwhile): its re-attachment needs no marker. */
  detachedForPause = false;

  constructor(
    public rec: SessionRecord,
    readonly spool: OutputSpool,
  ) {}

  get id(): string {
    return this.rec.session_id;
  }

  /** Wakes every waiting reader (new output, or the end). */
  notify(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Resolves on new output or the end, after `ms`, or when `signal` aborts. */
  waitForChange(ms: number, signal?: AbortSignal): Promise<void> {
    if (ms <= 0 || !this.rec.running) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        this.waiters = this.waiters.filter((w) => w !== done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener("abort", done, { once: true });
      this.waiters.push(done);
    });
  }
}

/** Bytes at the end of `data` that start a UTF-8 character not yet complete (0-3). */
export function incompleteUtf8Tail(data: Uint8Array): number {
  for (let back = 1; back <= Math.min(3, data.length); back++) {
    const b = data[data.length - back]!;
    if ((b & 0xc0) === 0x80) continue; // a continuation byte: look further back
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}
