import type { Accel } from "../host/accel.js";
import type { HostCheck } from "../host/checks.js";
import type { Runtime } from "./runtime.js";

/** What a runtime is given when it is made. */
export interface RuntimeContext {
  /** Where kernels and templates live (default imagesDir()). */
  imagesDir?: string;
}

/**
 * A runtime describes itself from its own folder (runtimes/<name>/descriptor.ts):
 * how it is made, what it needs on a host, and the defaults that depend on
 * it. runtimes/registry.ts lists them; nothing else names a runtime.
 */
export interface RuntimeDescriptor {
  readonly name: string;
  /** A few words for `serve --help`: what its sandboxes are and what it needs. */
  readonly help: string;
  /** What its sandboxes are, for serve's start-up banner. */
  readonly banner: string;
  /** Sandboxes `serve` keeps started ahead of creates unless told otherwise (each costs an idle sandbox of this runtime). */
  readonly warmPoolDefault: number;
  /** Its sandboxes run on the base template's root directory: `serve` (as root) builds it before starting. */
  readonly baseImageAtStart: boolean;
  /** Its sandboxes boot an image's packed disk (rootfs.ext4), which template builds then make too. */
  readonly bootsDisk: boolean;
  /** Where snapshots stand on this runtime, for the error a sandbox that can take none answers with. */
  readonly snapshotsHint: string;
  create(ctx: RuntimeContext): Promise<Runtime>;
  /** What it needs on a host, for `locale2b doctor` (a check it cannot run without has `required` = its name). */
  checks(env: NodeJS.ProcessEnv, accel: Promise<Accel>): Promise<HostCheck>[];
  /** doctor's one-line verdict on this runtime from the checks. */
  summary(checks: HostCheck[]): string;
  /** For `doctor --help`: what its checks look for ("" when nothing). */
  readonly doctorHelp: string;
  /** The settings its checks read (for `doctor --help`). */
  readonly doctorSettings: readonly string[];
}
