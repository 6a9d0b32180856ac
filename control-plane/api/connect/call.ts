// How every Connect handler of the control plane runs: what it throws becomes
// a Connect code (convert.ts's mapping), server-side failures are logged as
// errors, refusals at debug.
import { Code, type ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { toConnectError } from "./convert.js";

/** Runs a unary handler for `method` (about `sandboxId`, when it is about one), mapping what it throws. */
export type Call = <T>(method: string, sandboxId: string | undefined, fn: () => Promise<T>) => Promise<T>;

/** Runs a server-streaming handler, mapping what it throws as Call does. */
export type StreamCall = <T>(method: string, fn: () => AsyncGenerator<T>) => AsyncGenerator<T>;

function mapped(log: Logger, method: string, sandboxId: string | undefined, err: unknown): ConnectError {
  const ce = toConnectError(err);
  const fields = { method, ...(sandboxId ? { sandboxId } : {}), code: Code[ce.code] };
  if (ce.code === Code.Internal || ce.code === Code.Unavailable) log.error({ ...fields, err }, "rpc failed");
  else log.debug({ ...fields, msg: ce.rawMessage }, "rpc refused");
  return ce;
}

export function rpcCall(log: Logger): Call {
  return async (method, sandboxId, fn) => {
    try {
      return await fn();
    } catch (err) {
      throw mapped(log, method, sandboxId, err);
    }
  };
}

export function rpcStream(log: Logger): StreamCall {
  return async function* (method, fn) {
    try {
      yield* fn();
    } catch (err) {
      throw mapped(log, method, undefined, err);
    }
  };
}
