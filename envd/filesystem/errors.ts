import { Code, ConnectError } from "@connectrpc/connect";
import { AccessDenied } from "../auth/fs-access.js";

/** The errno code of a Node system error (`ENOENT`, …), if it is one. */
export function errnoOf(err: unknown): string | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === "string" ? code : undefined;
}

export function isNotFound(err: unknown): boolean {
  return errnoOf(err) === "ENOENT";
}

/** A short, human description of a system error without Node's stack noise. */
export function describe(err: unknown): string {
  if (err instanceof ConnectError) return err.rawMessage;
  const e = err as NodeJS.ErrnoException | undefined;
  if (e && typeof e.code === "string" && typeof e.syscall === "string") {
    const reason = e.message.replace(/^[A-Z]+:\s*/, "").replace(/,\s*\w+\s+'.*$/, "");
    return `${e.syscall} ${e.path ?? ""}: ${reason}`.replace(/ :/, ":");
  }
  return err instanceof Error ? err.message : String(err);
}

/** Wraps any error as `internal` with context (the kernel's refusals as `permission_denied`), passing ConnectErrors through. */
export function internal(context: string, err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof AccessDenied) return new ConnectError(err.message, Code.PermissionDenied);
  const code = errnoOf(err);
  if (code === "EACCES" || code === "EPERM") return new ConnectError(`${context}: permission denied (${describe(err)})`, Code.PermissionDenied, undefined, undefined, err);
  if (code === "EROFS") return new ConnectError(`${context}: the filesystem is read-only`, Code.FailedPrecondition, undefined, undefined, err);
  if (code === "ENOSPC" || code === "EDQUOT") return new ConnectError(`${context}: no space left on the sandbox's disk`, Code.ResourceExhausted, undefined, undefined, err);
  return new ConnectError(`${context}: ${describe(err)}`, Code.Internal, undefined, undefined, err);
}

/** Runs an access check, turning a refusal into `permission_denied`. */
export function guard(check: () => void): void {
  try {
    check();
  } catch (err) {
    if (err instanceof AccessDenied) throw new ConnectError(err.message, Code.PermissionDenied);
    throw err;
  }
}
