import { randomBytes } from "node:crypto";
import type { ActivityEvent, WatchActivityResponse } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import type { NewEvent } from "./types.js";

/** Tags the workspace API starts its processes with: a background session, or one blocking exec. */
export const SESSION_TAG_PREFIX = "l2b-session-";
export const EXEC_TAG_PREFIX = "l2b-exec-";
/** Processes the control plane runs for its own upkeep (making /workspace, killing a timed-out exec): not events. */
export const INTERNAL_TAG_PREFIX = "l2b-internal-";

const SHELL = /(^|\/)(bash|sh|dash|zsh|ash)$/;

/** Longest command an event (and the audit log) keeps: a heredoc script can be any size. */
export const MAX_COMMAND_CHARS = 16 * 1024;

/** A command cut to MAX_COMMAND_CHARS, saying how much was left out. */
export function capCommand(command: string): string {
  return command.length <= MAX_COMMAND_CHARS ? command : `${command.slice(0, MAX_COMMAND_CHARS)}…[${command.length - MAX_COMMAND_CHARS} more characters]`;
}

function quote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** The command line a person would recognise: a shell's `-c` script, else the argv, quoted. */
export function commandOf(cmd: string, args: readonly string[]): string {
  if (SHELL.test(cmd)) {
    const c = args.findIndex((a) => a === "-c" || (/^-[a-z]*c[a-z]*$/.test(a) && a !== "--"));
    if (c >= 0 && c + 1 < args.length) return args[c + 1]!;
  }
  return [cmd, ...args].map(quote).join(" ");
}

/**
 * Tags the control plane gave processes it started itself: an internal one
 * (not an event) or a blocking workspace exec (audited as its request). A
 * tag is anyone's to set through envd's process API and shows in
 * `commands.list()`, so only a tag issued here, and only for the first
 * process that carries it, gets that treatment: a process that names itself
 * `l2b-internal-…` or copies an exec's tag is an ordinary command, evented
 * and audited. Issued tags that are never seen expire.
 */
export class ControlTags {
  private readonly issued = new Map<string, number>();

  constructor(private readonly ttlMs = 15 * 60_000) {}

  /** Records `tag` as the control plane's for a process it is about to start in `sandboxId`; returns it. */
  issue(sandboxId: string, tag: string): string {
    const now = Date.now();
    if (this.issued.size > 10_000) for (const [k, until] of this.issued) if (until < now) this.issued.delete(k);
    this.issued.set(`${sandboxId}\0${tag}`, now + this.ttlMs);
    return tag;
  }

  /** True once for an issued tag (its process's start), false for any other. */
  claim(sandboxId: string, tag: string | undefined): boolean {
    if (!tag) return false;
    const key = `${sandboxId}\0${tag}`;
    const until = this.issued.get(key);
    this.issued.delete(key);
    return until !== undefined && until >= Date.now();
  }
}

/** The server's one registry (tags carry random parts and the sandbox id keys them, so servers in one process never mix). */
export const controlTags = new ControlTags();

/** A fresh internal tag for one process of the control plane's own, issued for `sandboxId`. */
export function internalTag(sandboxId: string, what: string): string {
  return controlTags.issue(sandboxId, `${INTERNAL_TAG_PREFIX}${what}-${randomBytes(6).toString("hex")}`);
}

/** The workspace API's ids a process tag carries: a session's, or (issued here) a blocking exec's. */
export function idsOfTag(tag: string | undefined, issued = false): { session_id?: string; exec_id?: string } {
  if (tag?.startsWith(SESSION_TAG_PREFIX)) return { session_id: tag.slice(SESSION_TAG_PREFIX.length) };
  if (issued && tag?.startsWith(EXEC_TAG_PREFIX)) return { exec_id: tag.slice(EXEC_TAG_PREFIX.length) };
  return {};
}

interface Started {
  command: string;
  ids: { session_id?: string; exec_id?: string };
  /** The control plane's own process (an issued internal tag): no events. */
  internal: boolean;
}

/** A WatchActivity message's events: a batch (envd gathers a few milliseconds), or one from an older envd. */
export function watchedEvents(msg: WatchActivityResponse): ActivityEvent[] {
  return msg.events.length > 0 ? msg.events : msg.event ? [msg.event] : [];
}

/**
 * Turns one sandbox's envd activity into events. It remembers each running
 * process's command, so that its end event names it too.
 */
export class ActivityTranslator {
  private readonly running = new Map<number, Started>();

  constructor(
    private readonly sandboxId: string,
    private readonly redact: (text: string) => string,
    /** Why a process the control plane itself killed ended (a workspace exec's timeout), by tag. */
    private readonly endReason: (tag: string | undefined) => string | undefined = () => undefined,
    private readonly tags: ControlTags = controlTags,
  ) {}

  translate(a: ActivityEvent): NewEvent | undefined {
    const tag = a.event.case?.startsWith("process") ? (a.event.value as { tag?: string }).tag : undefined;
    // A start (or a start that failed) uses up its issued tag; an end follows its start.
    const issued = (a.event.case === "processStarted" || a.event.case === "processFailed") && this.tags.claim(this.sandboxId, tag);
    if (issued && tag?.startsWith(INTERNAL_TAG_PREFIX)) {
      if (a.event.case === "processStarted") this.running.set(a.event.value.pid, { command: "", ids: {}, internal: true });
      return undefined;
    }
    const time = a.time ? Number(a.time.seconds) * 1000 + Math.floor(a.time.nanos / 1e6) : Date.now();
    const base = { sandbox_id: this.sandboxId, time };
    const e = a.event;
    switch (e.case) {
      case "processStarted": {
        const command = capCommand(this.redact(commandOf(e.value.cmd, e.value.args)));
        const ids = idsOfTag(e.value.tag, issued);
        this.running.set(e.value.pid, { command, ids, internal: false });
        return {
          ...base,
          event_type: "exec.started",
          ...ids,
          command,
          pid: e.value.pid,
          cwd: this.redact(e.value.cwd),
          user: e.value.user,
        };
      }
      case "processEnded": {
        const started = this.running.get(e.value.pid);
        this.running.delete(e.value.pid);
        if (started?.internal) return undefined;
        // An end whose start this watch did not see (it began before a restart): a session's tag still says whose it is.
        const ids = started?.ids ?? idsOfTag(e.value.tag);
        const ok = e.value.exited && e.value.exitCode === 0;
        const reason = this.endReason(e.value.tag);
        return {
          ...base,
          event_type: ok ? "exec.completed" : "exec.failed",
          ...ids,
          ...(started ? { command: started.command } : {}),
          pid: e.value.pid,
          exit_code: e.value.exitCode,
          duration_ms: Number(e.value.durationMs),
          ...(!ok ? { error: reason ?? e.value.error ?? e.value.status } : {}),
        };
      }
      case "processFailed": {
        return {
          ...base,
          event_type: "exec.failed",
          ...idsOfTag(e.value.tag, issued),
          command: capCommand(this.redact(commandOf(e.value.cmd, e.value.args))),
          cwd: this.redact(e.value.cwd),
          user: e.value.user,
          error: this.redact(e.value.error),
        };
      }
      case "fileRead":
      case "fileWritten":
        return {
          ...base,
          event_type: e.case === "fileRead" ? "file.read" : "file.written",
          path: this.redact(e.value.path),
          bytes: Number(e.value.bytes),
          user: e.value.user,
        };
      default:
        return undefined;
    }
  }
}
