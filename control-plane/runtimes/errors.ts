/** A runtime cannot run on this host (a missing tool, image or permission); the message says what to do. */
export class RuntimeUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RuntimeUnavailableError";
  }
}

/** A snapshot this runtime cannot start from (another kind, or files it needs are gone); the message says what to do. */
export class SnapshotUnusableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SnapshotUnusableError";
  }
}
