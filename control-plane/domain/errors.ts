/** A failure every API surface maps to its own shape (HTTP status, Connect code). */
export class ControlPlaneError extends Error {
  constructor(
    readonly kind: "not_found" | "conflict" | "invalid" | "capacity" | "unavailable" | "unauthenticated" | "internal",
    message: string,
    /** For `capacity`: seconds after which a retry may succeed. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = "ControlPlaneError";
  }
}
