// Templates as E2B's template API sees them: a template has names (aliases),
// builds, and tags that point at builds. A build runs steps in a real
// sandbox and ends as an image in the image cache that sandboxes boot.

/** E2B's TemplateBuildStatus. */
export type BuildStatus = "waiting" | "building" | "ready" | "error";

export interface TemplateRecord {
  /** 20 lowercase alphanumerics (E2B's template ids), or a built-in template's name (`base`). */
  id: string;
  /** Names (E2B's aliases), unique on the server. */
  names: string[];
  public: boolean;
  /** Defaults for sandboxes of this template (the last build's request). */
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  /** ms since epoch */
  createdAt: number;
  updatedAt: number;
  lastSpawnedAt?: number;
  spawnCount: number;
  buildCount: number;
  /** Built from a definition on the server (rootfs/templates/*.yaml): not removable through the API. */
  builtIn?: boolean;
}

/** One step of a build, as the SDKs send it (TemplateStep). */
export interface BuildStep {
  type: string;
  args: string[];
  filesHash?: string;
  force?: boolean;
}

/** Credentials for a private registry (E2B's FromImageRegistry). */
export type RegistryAuth =
  | { type: "registry"; username: string; password: string }
  | { type: "aws"; awsAccessKeyId: string; awsSecretAccessKey: string; awsRegion: string }
  | { type: "gcp"; serviceAccountJson: string };

/** What a build was asked to do (TemplateBuildStartV2), minus credentials, which are never stored. */
export interface BuildSpec {
  fromImage?: string;
  fromTemplate?: string;
  force: boolean;
  steps: BuildStep[];
  startCmd?: string;
  readyCmd?: string;
}

/**
 * What a sandbox boots and starts with, as its template gave it at create:
 * the image (a key of the image cache) and what the template's build left
 * for its sandboxes (ENV, USER, WORKDIR, start and ready commands).
 */
export interface SandboxBoot {
  image: string;
  /** Under the create's own env vars. */
  envs?: Record<string, string>;
  /** envd's default user and workdir (over the runtime's). */
  user?: string;
  workdir?: string;
  /** Runs in the background once envd answers; the create answers once `readyCmd` exits 0. */
  startCmd?: string;
  readyCmd?: string;
}

/** What a ready build gives its sandboxes (the image's ENV, WORKDIR and USER after the last step), and its size. */
export interface BuildResult extends SandboxBoot {
  /** Bytes of the template's root filesystem. */
  rootfsBytes: number;
}

export interface TemplateBuildRecord {
  /** A UUID (E2B's build ids). */
  id: string;
  templateId: string;
  status: BuildStatus;
  /** Why it failed: the message, the step (`base`, `finalize` or the 1-based step number). */
  reason?: { message: string; step?: string };
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  /** The tags the build is to get once ready (from the create request). */
  tags: string[];
  spec?: BuildSpec;
  result?: BuildResult;
  /** Its image was removed (no tag pointed at it any more); the record stays as history. */
  imageRemoved?: boolean;
  envdVersion: string;
  /** ms since epoch */
  createdAt: number;
  updatedAt: number;
  finishedAt?: number;
}

export interface TemplateTagRecord {
  templateId: string;
  tag: string;
  buildId: string;
  /** ms since epoch */
  createdAt: number;
}

/** One line of a build's log (BuildLogEntry). */
export interface BuildLogEntry {
  /** ms since epoch */
  timestamp: number;
  level: "debug" | "info" | "warn" | "error";
  message: string;
  step?: string;
}
