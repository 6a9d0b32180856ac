// The template build settings (the LOCALE2B_TEMPLATE_BUILDS family in settings.ts), read once at start.
import { cpus } from "node:os";
import { setting, type SettingName } from "../settings.js";

export interface TemplateSettings {
  concurrentBuilds: number;
  buildTimeoutMs: number;
  buildDiskMB: number;
  cacheBytes: number;
  uploadMaxBytes: number;
  uploadTtlSeconds: number;
  /** How long a template's ready command may take to succeed (a build's check, and each create). */
  readyTimeoutMs: number;
}

const MiB = 1024 * 1024;

function int(name: SettingName, dflt: number, min: number, max: number, env: NodeJS.ProcessEnv): number {
  const raw = setting(name, env);
  if (raw === undefined || raw === "") return dflt;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name}=${raw}: expected an integer from ${min} to ${max}`);
  return n;
}

export function templateSettings(env: NodeJS.ProcessEnv = process.env): TemplateSettings {
  return {
    concurrentBuilds: int("LOCALE2B_TEMPLATE_BUILDS", Math.max(1, Math.floor(cpus().length / 4)), 1, 64, env),
    buildTimeoutMs: int("LOCALE2B_TEMPLATE_BUILD_TIMEOUT_S", 3600, 10, 7 * 24 * 3600, env) * 1000,
    buildDiskMB: int("LOCALE2B_TEMPLATE_BUILD_DISK_MB", 10240, 256, 1024 * 1024, env),
    cacheBytes: int("LOCALE2B_TEMPLATE_CACHE_MB", 10240, 0, 100 * 1024 * 1024, env) * MiB,
    uploadMaxBytes: int("LOCALE2B_TEMPLATE_UPLOAD_MAX_MB", 2048, 1, 1024 * 1024, env) * MiB,
    uploadTtlSeconds: int("LOCALE2B_TEMPLATE_UPLOAD_TTL_S", 3600, 10, 7 * 24 * 3600, env),
    readyTimeoutMs: int("LOCALE2B_TEMPLATE_READY_TIMEOUT_S", 600, 1, 24 * 3600, env) * 1000,
  };
}
