// The one error an image pull throws: a code the template build API maps to
// a status, and a message that says what to fix.

export type ImagePullErrorCode =
  /** The ref or the credentials' shape is wrong (the caller's input). */
  | "invalid"
  /** The registry has no such image or tag. */
  | "not_found"
  /** The registry (or AWS) refused the credentials, or wants some. */
  | "unauthorized"
  /** The registry cannot be reached (DNS, refused, timed out). */
  | "unreachable"
  /** Plain HTTP or an untrusted certificate where neither is allowed. */
  | "insecure"
  /** The image has no linux/amd64 variant. */
  | "platform"
  /** Over the size limit. */
  | "too_large"
  | "timeout"
  | "cancelled"
  /** skopeo or umoci is missing and cannot be installed. */
  | "setup"
  /** Anything else: the tool's own words are in the message. */
  | "failed";

export class ImagePullError extends Error {
  constructor(
    readonly code: ImagePullErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "ImagePullError";
  }
}
