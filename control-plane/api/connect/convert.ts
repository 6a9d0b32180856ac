// Domain ↔ wire: SandboxRecord → Sandbox, state and event enums, and
// ControlPlaneError → ConnectError.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  SandboxEventType,
  SandboxState,
  TimeoutAction,
  type SandboxSchema,
} from "../../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import { ControlPlaneError } from "../../domain/errors.js";
import type { LifecycleEventType, SandboxRecord, SandboxState as DomainState } from "../../domain/sandbox.js";
import { WORKSPACE_METADATA } from "../../workspace/metadata.js";

const STATES: Record<DomainState, SandboxState> = {
  creating: SandboxState.CREATING,
  running: SandboxState.RUNNING,
  pausing: SandboxState.PAUSING,
  paused: SandboxState.PAUSED,
  resuming: SandboxState.RESUMING,
  killed: SandboxState.KILLED,
};

const EVENTS: Record<LifecycleEventType, SandboxEventType> = {
  created: SandboxEventType.CREATED,
  paused: SandboxEventType.PAUSED,
  resumed: SandboxEventType.RESUMED,
  killed: SandboxEventType.KILLED,
  timed_out: SandboxEventType.TIMED_OUT,
};

export function stateToProto(state: DomainState): SandboxState {
  return STATES[state];
}

/** The domain state of a wire state; INVALID_ARGUMENT for UNSPECIFIED or unknown numbers. */
export function stateFromProto(state: SandboxState): DomainState {
  const found = (Object.entries(STATES) as [DomainState, SandboxState][]).find(([, v]) => v === state);
  if (!found) throw new ConnectError(`invalid sandbox state ${SandboxState[state] ?? state}`, Code.InvalidArgument);
  return found[0];
}

export function eventTypeToProto(type: LifecycleEventType): SandboxEventType {
  return EVENTS[type];
}

const u32 = (n: number) => Math.max(0, Math.min(0xffffffff, Math.trunc(n)));

export function sandboxToProto(r: SandboxRecord): MessageInitShape<typeof SandboxSchema> {
  return {
    sandboxId: r.id,
    templateId: r.templateId,
    state: stateToProto(r.state),
    metadata: { ...r.metadata },
    startedAt: timestampFromMs(r.startedAt),
    endAt: timestampFromMs(r.endAt),
    cpuCount: u32(r.cpuCount),
    memoryMb: u32(r.memoryMB),
    diskSizeMb: u32(r.diskSizeMB),
    envdVersion: r.envdVersion,
    envdAccessToken: r.envdAccessToken,
    onTimeout: r.onTimeout === "pause" ? TimeoutAction.PAUSE : TimeoutAction.KILL,
    runtime: r.runtime,
    autoResume: r.autoResume,
    allowInternetAccess: r.allowInternetAccess,
    alias: r.alias ?? "",
    endReason: r.state === "killed" ? (r.endReason ?? "") : "",
    workspaceId: r.metadata[WORKSPACE_METADATA] ?? "",
  };
}

const CODES: Record<ControlPlaneError["kind"], Code> = {
  not_found: Code.NotFound,
  conflict: Code.FailedPrecondition,
  invalid: Code.InvalidArgument,
  capacity: Code.ResourceExhausted,
  unavailable: Code.Unavailable,
  unauthenticated: Code.Unauthenticated,
  internal: Code.Internal,
};

/**
 * A ConnectError for whatever a handler threw: ControlPlaneError kinds map
 * to their codes (capacity with a `retry-after` header); ConnectErrors pass
 * through; anything else is INTERNAL.
 */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof ControlPlaneError) {
    const meta = err.retryAfterSeconds !== undefined ? { "retry-after": String(err.retryAfterSeconds) } : undefined;
    return new ConnectError(err.message, CODES[err.kind], meta, undefined, err);
  }
  return new ConnectError(err instanceof Error ? err.message : String(err), Code.Internal, undefined, undefined, err);
}

/** A required string field; INVALID_ARGUMENT when empty. */
export function required(value: string, field: string): string {
  const v = value.trim();
  if (!v) throw new ConnectError(`${field} is required`, Code.InvalidArgument);
  return v;
}
