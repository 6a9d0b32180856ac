// One template build, start to end: the base (a template here, or an image
// from a registry), the steps in a real sandbox of the server's runtime (each
// step's result cached by its key, so a rebuild runs only what changed), the
// finished root exported into a new image, and the start and ready commands
// checked on a sandbox of that image. A failure names its step; nothing of a
// failed build stays but the cached results of the steps that succeeded.
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { join, posix } from "node:path";
import type { Logger } from "pino";
import type { BuildLogEntry, BuildResult, BuildSpec, BuildStep, RegistryAuth, SandboxBoot, TemplateBuildRecord } from "../domain/template.js";
import { findTemplateImage, GUEST } from "../images/layout.js";
import type { RuntimeSet } from "../runtimes/runtime-set.js";
import type { Runtime } from "../runtimes/runtime.js";
import { findRuntime } from "../runtimes/registry.js";
import { BuildSandbox } from "./build-sandbox.js";
import type { BuildLog } from "./build-log.js";
import { addMountPoints, linkUnchanged, removeDeviceNodes, unpackInto } from "./export-root.js";
import { ADD_URL_SCRIPT, COPY_SCRIPT, EXPORT_SCRIPT, USER_SCRIPT, WORKDIR_SCRIPT } from "./guest-scripts.js";
import { imageWorkDir, provisionGuest, publishImage, removeImage } from "./image-output.js";
import { runStartCommand } from "./start-command.js";
import { EnvdRpc } from "../transport/envd-rpc.js";
import { mustRun } from "../images/template-exec.js";
import type { BuildState, StepCache } from "./step-cache.js";
import { stepKeys } from "./steps.js";
import type { TemplateFiles } from "./uploads.js";

/** A build failure: what went wrong and at which step (`base`, `finalize`, or the 1-based step number). */
export class BuildFailure extends Error {
  constructor(
    message: string,
    readonly step: string,
  ) {
    super(message);
    this.name = "BuildFailure";
  }
}

/** A base image pulled from a registry and made runnable (base-images.ts). */
export interface PulledBase {
  image: string;
  /** What identifies its content (the manifest digest and the provisioning). */
  key: string;
  boot: SandboxBoot;
}

export interface BuilderDeps {
  imagesDir: string;
  dataDir: string;
  runtimes: RuntimeSet;
  files: TemplateFiles;
  cache: StepCache;
  /** What a template reference boots (fromTemplate), without counting a spawn. */
  baseOf(ref: string): Promise<SandboxBoot | undefined>;
  /** Pulls `ref` and makes it a runnable image (fromImage). */
  pull(ref: string, auth: RegistryAuth | undefined, signal: AbortSignal, say: (message: string) => void): Promise<PulledBase>;
  /** The disk a build sandbox gets (sparse: only what it writes takes space). */
  buildDiskMB: number;
  /** How long the ready command may take on the new image. */
  readyTimeoutMs: number;
  log: Logger;
}

/** E2B's base image name: its `base` is ours. */
const E2B_BASE = /^(docker\.io\/)?e2bdev\/base(:[\w.-]+)?$/;
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** `$VAR` and `${VAR}` of a Dockerfile ENV value, from the state's variables (unknown: empty). */
export function expandEnv(value: string, vars: Record<string, string>): string {
  return value.replace(/\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (all, braced?: string, bare?: string) => {
    if (all === "\\$") return "$";
    const name = (braced ?? bare)!;
    return vars[name] ?? (name === "PATH" ? DEFAULT_PATH : "");
  });
}

function lines(entries: string[], max = 5): string {
  const tail = entries.filter((l) => l.trim() !== "").slice(-max);
  return tail.length ? `: ${tail.join(" | ")}` : "";
}

export class TemplateBuilder {
  constructor(private readonly d: BuilderDeps) {}

  /** Runs the build to its end; its image key and what its sandboxes start with, or a BuildFailure. */
  async run(build: TemplateBuildRecord, spec: BuildSpec, auth: RegistryAuth | undefined, log: BuildLog, signal: AbortSignal): Promise<BuildResult> {
    const say = (message: string, step?: string, level: BuildLogEntry["level"] = "info") => log.add({ timestamp: Date.now(), level, message, ...(step ? { step } : {}) });
    const work = join(this.d.dataDir, "template-builds", build.id);
    mkdirSync(work, { recursive: true, mode: 0o700 });
    try {
      const base = await this.base(spec, auth, signal, say).catch((err: Error) => {
        throw err instanceof BuildFailure ? err : new BuildFailure(err.message, "base");
      });
      const runtime = await this.d.runtimes.forTemplate(base.boot.image).catch((err: Error) => {
        throw new BuildFailure(`the runtime of base image ${base.boot.image} cannot start here: ${err.message}`, "base");
      });
      const keys = stepKeys(createHash("sha256").update(`${runtime.name}\n${base.key}`).digest("hex"), spec.steps);
      const state: BuildState = {
        envs: { ...base.boot.envs },
        user: base.boot.user ?? GUEST.user,
        workdir: base.boot.workdir ?? GUEST.home,
        args: {},
      };
      const image = `@${build.id}`;
      let published: { rootfsBytes: number };
      let final = state;
      if (spec.steps.length === 0) {
        // Nothing runs in it: the base's own files are the template's (an image with no shell or tar needs none).
        published = await this.copyBase(base.boot.image, runtime, image, build, spec, work, say);
      } else {
        const result = await this.steps(build, spec, base.boot.image, runtime, keys, state, work, say, signal);
        say("exporting the template's files", "finalize");
        published = await this.publish(result.sandbox, runtime, image, base.boot.image, build, spec, signal, say).finally(() => result.sandbox.kill());
        final = result.state;
      }
      try {
        const boot: SandboxBoot = {
          image,
          envs: final.envs,
          user: final.user,
          workdir: final.workdir,
          ...(spec.startCmd ? { startCmd: spec.startCmd } : {}),
          ...(spec.readyCmd ? { readyCmd: spec.readyCmd } : {}),
        };
        if (spec.startCmd || spec.readyCmd) await this.checkStart(runtime, boot, build, work, say, signal);
        say(`template image ready (${Math.round(published.rootfsBytes / 2 ** 20)} MiB)`, "finalize");
        return { ...boot, rootfsBytes: published.rootfsBytes };
      } catch (err) {
        await removeImage(this.d.imagesDir, image);
        throw err;
      }
    } finally {
      rmSync(work, { recursive: true, force: true });
      void this.d.cache.prune().catch((err: unknown) => this.d.log.warn({ err }, "pruning the template step cache failed"));
    }
  }

  /** The base: a template here (`base` by default; E2B's own base image name is ours too), or an image from a registry. */
  private async base(spec: BuildSpec, auth: RegistryAuth | undefined, signal: AbortSignal, say: (m: string, step?: string) => void): Promise<{ boot: SandboxBoot; key: string }> {
    const fromImage = spec.fromImage?.trim();
    if (fromImage && !E2B_BASE.test(fromImage)) {
      say(`pulling ${fromImage}`, "base");
      const pulled = await this.d.pull(fromImage, auth, signal, (m) => say(m, "base"));
      return { boot: pulled.boot, key: `image:${pulled.key}` };
    }
    const ref = spec.fromTemplate ?? "base";
    const boot = await this.d.baseOf(ref);
    if (!boot) throw new BuildFailure(`base template '${ref}' has no ready build`, "base");
    const img = findTemplateImage(boot.image, this.d.imagesDir);
    if (!img) throw new BuildFailure(`base template '${ref}' has no image on this host`, "base");
    say(`from template ${ref}`, "base");
    return { boot, key: `template:${boot.image}:${img.hash}` };
  }

  /** Runs the steps (from the last cached one on) in a build sandbox, which it returns still running. */
  private async steps(
    build: TemplateBuildRecord,
    spec: BuildSpec,
    baseImage: string,
    runtime: Runtime,
    keys: string[],
    initial: BuildState,
    work: string,
    say: (m: string, step?: string, level?: BuildLogEntry["level"]) => void,
    signal: AbortSignal,
  ): Promise<{ sandbox: BuildSandbox; state: BuildState }> {
    // The last cached step before any forced one.
    const firstForced = spec.force ? 0 : spec.steps.findIndex((s) => s.force);
    const usable = firstForced === -1 ? spec.steps.length : firstForced;
    let from = -1;
    let cached: ReturnType<StepCache["get"]>;
    for (let i = usable - 1; i >= 0; i--) {
      cached = this.d.cache.get(keys[i]!, runtime.name);
      if (cached) {
        from = i;
        break;
      }
    }
    let state = cached ? structuredClone(cached.state) : structuredClone(initial);
    for (let i = 0; i <= from; i++) say(`CACHED ${describe(spec.steps[i]!)}`, String(i + 1));
    const sandbox = await this.startSandbox(runtime, baseImage, build, join(work, "sandbox"), from >= 0 ? String(from + 1) : "base", cached?.filesDir);
    try {
      const probe = await sandbox.run("test -x /bin/bash", { user: "root", signal }).catch((err: Error) => {
        if (signal.aborted) throw err;
        throw new BuildFailure(`the build's steps run in a shell, and the image has none (${err.message.replace(/^\[\w+\] /, "")}): add one (busybox, say), or build from it without steps`, String(from + 2));
      });
      const shell = probe.exitCode === 0 ? "/bin/bash" : "/bin/sh";
      let lastFiles = from >= 0 ? keys[from]! : undefined;
      for (let i = from + 1; i < spec.steps.length; i++) {
        const step = spec.steps[i]!;
        const n = String(i + 1);
        signal.throwIfAborted();
        say(`${describe(step)}`, n);
        state = await this.step(sandbox, step, i, state, shell, (m, level) => say(m, n, level), signal).catch((err: Error) => {
          throw err instanceof BuildFailure || signal.aborted ? err : new BuildFailure(err.message, n);
        });
        if (step.type === "ENV" || step.type === "ARG") {
          if (lastFiles) this.d.cache.putState(keys[i]!, state, lastFiles, runtime.name);
          continue;
        }
        const staged = this.d.cache.staging(keys[i]!);
        try {
          await sandbox.snapshot(staged.dir);
          staged.commit(state, runtime.name);
          lastFiles = keys[i]!;
        } catch (err) {
          staged.discard();
          say(`this step's result could not be cached (${(err as Error).message}); the build goes on`, n, "warn");
        }
      }
      return { sandbox, state };
    } catch (err) {
      await sandbox.kill();
      throw err;
    }
  }

  /** One step; the state after it. */
  private async step(
    sandbox: BuildSandbox,
    step: BuildStep,
    index: number,
    state: BuildState,
    shell: string,
    say: (m: string, level?: BuildLogEntry["level"]) => void,
    signal: AbortSignal,
  ): Promise<BuildState> {
    const a = step.args;
    const asRoot = async (what: string, script: string, args: string[]) => {
      const r = await sandbox.run(script, { user: "root", args, onLine: (l) => say(l), signal });
      if (r.exitCode !== 0) throw new BuildFailure(`${what} failed (exit ${r.exitCode})${lines(r.tail)}`, String(index + 1));
    };
    switch (step.type) {
      case "RUN": {
        const user = a[1] || state.user;
        const r = await sandbox.run(a[0]!, { user, cwd: state.workdir, envs: { ...state.args, ...state.envs }, onLine: (l) => say(l), signal }, shell);
        if (r.exitCode !== 0) throw new BuildFailure(`the command exited with ${r.exitCode}${lines(r.tail)}`, String(index + 1));
        return state;
      }
      case "ENV": {
        const envs = { ...state.envs };
        for (let i = 0; i < a.length; i += 2) envs[a[i]!] = expandEnv(a[i + 1]!, { ...state.args, ...envs });
        return { ...state, envs };
      }
      case "ARG":
        return { ...state, args: { ...state.args, [a[0]!]: state.args[a[0]!] ?? a[1] ?? "" } };
      case "WORKDIR": {
        const dir = posix.resolve(state.workdir, expandEnv(a[0]!, { ...state.args, ...state.envs }));
        await asRoot(`making the directory ${dir}`, WORKDIR_SCRIPT, [dir, state.user === "root" ? "" : state.user]);
        return { ...state, workdir: dir };
      }
      case "USER":
        await asRoot(`setting up the user ${a[0]}`, USER_SCRIPT, [a[0]!, a[1] === "true" ? "true" : ""]);
        return { ...state, user: a[0]! };
      case "COPY":
      case "ADD": {
        const [src, dest, user, mode] = a as [string, string, string?, string?];
        // `user:` is the user and its login group (Docker gives the uid as gid; a login group is what a user expects).
        const named = user || (state.user === "root" ? "" : state.user);
        const owner = named && !named.includes(":") ? `${named}:` : named;
        if (step.type === "ADD" && /^https?:\/\//.test(src)) {
          await asRoot(`downloading ${src}`, ADD_URL_SCRIPT, [src, dest, owner, mode ?? "", state.workdir]);
          return state;
        }
        const file = this.d.files.path(step.filesHash!);
        if (!file) throw new BuildFailure(`the files of '${src}' are no longer on the server: build again (the SDK uploads them)`, String(index + 1));
        this.d.files.touch(step.filesHash!);
        const archive = `/tmp/.l2b-copy-${randomBytes(6).toString("hex")}.tar`;
        await sandbox.upload(file, archive);
        await asRoot(`copying ${src} to ${dest}`, COPY_SCRIPT, [archive, src, dest, owner, mode ?? "", state.workdir]);
        return state;
      }
      default:
        throw new BuildFailure(`unknown step type ${step.type}`, String(index + 1));
    }
  }

  /** The build sandbox's root as the new image `key`. */
  private async publish(sandbox: BuildSandbox, runtime: Runtime, key: string, baseImage: string, build: TemplateBuildRecord, spec: BuildSpec, signal: AbortSignal, say: (message: string, step?: string, level?: BuildLogEntry["level"]) => void): Promise<{ rootfsBytes: number }> {
    const work = await imageWorkDir(this.d.imagesDir, key);
    try {
      const unpack = unpackInto(work.rootfs);
      const exported = await sandbox.run(EXPORT_SCRIPT, { user: "root", stdout: unpack.stdin, signal }).finally(() => unpack.stdin.end());
      await unpack.done;
      if (exported.exitCode !== 0) throw new BuildFailure(`exporting the files failed (exit ${exported.exitCode})${lines(exported.tail)}`, "finalize");
      const changed = exported.tail.filter((l) => /changed as we read it|removed before we read it/.test(l));
      if (changed.length) say(`files changed while they were exported (each is in the image as it was read): ${changed.join(" | ")}`, "finalize", "warn");
      await removeDeviceNodes(work.rootfs);
      await addMountPoints(work.rootfs);
      // What the steps left as the base had it is the base's file, shared (a hard link), not a copy.
      const base = findTemplateImage(baseImage, this.d.imagesDir);
      if (base) await linkUnchanged(work.rootfs, base.rootfsDir);
      await provisionGuest(this.d.imagesDir, work.rootfs);
      const ext4 = findRuntime(runtime.name)?.bootsDisk ?? false;
      return await publishImage(this.d.imagesDir, work, key, {
        ext4,
        diskSizeMB: build.diskSizeMB,
        // `owner`: the server whose template this build is (image-output.ts removes images whose owner is gone).
        description: { owner: this.d.dataDir, templateId: build.templateId, buildId: build.id, from: spec.fromImage ?? spec.fromTemplate ?? "base", steps: spec.steps.length },
      });
    } catch (err) {
      rmSync(work.dir, { recursive: true, force: true });
      throw err instanceof BuildFailure ? err : new BuildFailure((err as Error).message, "finalize");
    }
  }

  /**
   * A build without steps: the base image booted once (an image whose envd
   * cannot start fails here, at `base`), then its files copied as the new
   * image `key`.
   */
  private async copyBase(baseImage: string, runtime: Runtime, key: string, build: TemplateBuildRecord, spec: BuildSpec, work: string, say: (m: string, step?: string) => void): Promise<{ rootfsBytes: number }> {
    say("starting a sandbox of the base image", "base");
    const sandbox = await this.startSandbox(runtime, baseImage, build, join(work, "sandbox"), "base");
    await sandbox.kill();
    say("copying the base image's files", "finalize");
    const base = findTemplateImage(baseImage, this.d.imagesDir);
    if (!base) throw new BuildFailure(`the base image ${baseImage} is no longer on this host: build again`, "finalize");
    const out = await imageWorkDir(this.d.imagesDir, key);
    try {
      // Hard links: images are read-only, and what is added to this one replaces files (never writes into them).
      await mustRun("link the base image's files", "cp", ["-a", "--link", "--", `${base.rootfsDir}/.`, out.rootfs]);
      await removeDeviceNodes(out.rootfs);
      await provisionGuest(this.d.imagesDir, out.rootfs);
      return await publishImage(this.d.imagesDir, out, key, {
        ext4: findRuntime(runtime.name)?.bootsDisk ?? false,
        diskSizeMB: build.diskSizeMB,
        // `owner` as publish() has it: the clean-up of images whose server is gone reads it.
        description: { owner: this.d.dataDir, templateId: build.templateId, buildId: build.id, from: spec.fromImage ?? spec.fromTemplate ?? "base", steps: 0 },
      });
    } catch (err) {
      rmSync(out.dir, { recursive: true, force: true });
      throw err instanceof BuildFailure ? err : new BuildFailure((err as Error).message, "finalize");
    }
  }

  /**
   * A build's sandbox of `image` with the build's size, in `dir`, its files
   * those of `filesDir` when given (a cached step's); a failure to start is
   * the build's failure at `step`.
   */
  private startSandbox(runtime: Runtime, image: string, build: TemplateBuildRecord, dir: string, step: string, filesDir?: string): Promise<BuildSandbox> {
    return BuildSandbox.start({
      runtime,
      image,
      cpuCount: build.cpuCount,
      memoryMB: build.memoryMB,
      diskSizeMB: this.d.buildDiskMB,
      dir,
      ...(filesDir ? { from: { kind: "filesystem" as const, dir: filesDir, runtime: runtime.name } } : {}),
      log: this.d.log.child({ buildId: build.id }),
    }).catch((err: Error) => {
      throw new BuildFailure(err.message, step);
    });
  }

  /** Boots the new image once and runs its start command and ready check, as a create will. */
  private async checkStart(runtime: Runtime, boot: SandboxBoot, build: TemplateBuildRecord, work: string, say: (m: string, step?: string) => void, signal: AbortSignal): Promise<void> {
    say(`checking the start command${boot.readyCmd ? " and ready command" : ""} on the new image`, "finalize");
    const sandbox = await this.startSandbox(runtime, boot.image, build, join(work, "check"), "finalize");
    try {
      await runStartCommand(new EnvdRpc(), sandbox.target, boot, { signal, timeoutMs: this.d.readyTimeoutMs, onLine: (l) => say(l, "finalize") }).catch((err: Error) => {
        throw new BuildFailure(err.message, "finalize");
      });
    } finally {
      await sandbox.kill();
    }
  }
}

/** A step as its log shows it. */
function describe(step: BuildStep): string {
  const shown = step.type === "ENV" ? step.args.filter((_, i) => i % 2 === 0).map((k) => `${k}=…`) : step.args.filter((x) => x !== "");
  return `${step.type} ${shown.join(" ")}`.slice(0, 500);
}
