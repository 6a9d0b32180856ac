/** A runtime cannot run on this host (a missing tool, image or permission); the message says what to do. */
export class RuntimeUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RuntimeUnavailableError";
  }
}
