// Templates as a resource (E2B's template API): create a template and its
// builds, start a build, read its status and logs, list, update, tag,
// delete, and resolve a create's template reference to what it boots.
// Templates built from a definition on the server (rootfs/templates/*.yaml,
// `base` first) are shown as built-in templates: public, read-only.
import type { Logger } from "pino";
import { ENVD_VERSION } from "../../envd/version.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { SandboxBoot, BuildLogEntry, BuildSpec, RegistryAuth, TemplateBuildRecord, TemplateRecord, TemplateTagRecord } from "../domain/template.js";
import type { TemplateCatalog } from "../images/catalog.js";
import { buildingInBackground } from "../images/first-use.js";
import type { ResolvedTemplate, TemplateResolver } from "../manager/options.js";
import type { Store } from "../store/store.js";
import { KeyedLock } from "../manager/locks.js";
import { BuildLog, logsPage, statusPage } from "./build-log.js";
import { builtInBuild, builtInTemplate, type BuiltInDefaults } from "./built-in-templates.js";
import { DEFAULT_TAG, isTemplateId, newBuildId, newTemplateId, parseTemplateRef, printable, tagProblem, type TemplateRef } from "./names.js";
import { checkBuildSpec } from "./steps.js";
import { assignTags, deleteTags, taggedBuild } from "./template-tags.js";
import type { TemplateFiles } from "./uploads.js";

/** What a build start carries beside its spec: the registry's credentials, held in memory only. */
export interface BuildStart {
  spec: BuildSpec;
  auth?: RegistryAuth;
}

/** Runs builds (templates/build-queue.ts); the service only records them. */
export interface BuildRunner {
  /** Queues a build; `log` is its log; the runner moves its status on through `update`. */
  enqueue(build: TemplateBuildRecord, start: BuildStart, log: BuildLog): void;
  /** Stops a queued or running build; false when it is neither. */
  cancel(buildId: string): boolean;
  /** Images (image-cache keys) builds under way boot or make: not to be removed. */
  busy(buildId: string): boolean;
}

/** The shape of a template's sandboxes when its build names none. */
export type TemplateDefaults = BuiltInDefaults;

/** A template with its builds and tags, as the API shows it. */
export interface TemplateView {
  template: TemplateRecord;
  /** Newest first. */
  builds: TemplateBuildRecord[];
  tags: TemplateTagRecord[];
}

export interface TemplateServiceOptions {
  store: Store;
  catalog: TemplateCatalog;
  files: TemplateFiles;
  dataDir: string;
  defaults: TemplateDefaults;
  /** Whether a snapshot answers to this name (snapshots and templates share E2B's names). */
  snapshotNamed?: (name: string) => Promise<boolean>;
  /** Whether a live sandbox or a snapshot boots this image (a template in use is not deleted). */
  imageInUse?: (image: string) => Promise<string | undefined>;
  /** Removes a build's image from the image cache; resolves with its folders kept because a sandbox or snapshot still uses them. */
  removeImage?: (image: string) => Promise<string[]>;
  /** Removes images whose template is gone (image-output.ts removeOrphanImages). */
  removeOrphans?: () => Promise<void>;
  log: Logger;
}

export class TemplateService implements TemplateResolver {
  private runner: BuildRunner | undefined;
  private readonly openLogs = new Map<string, BuildLog>();
  private readonly lock = new KeyedLock();

  constructor(private readonly o: TemplateServiceOptions) {}

  /** Set once the build queue exists (it needs the service to record what happens). */
  setRunner(runner: BuildRunner): void {
    this.runner = runner;
  }

  /**
   * A restarted server: builds that were under way when it stopped are failed
   * (their sandbox went with it); images of templates that are gone go.
   */
  async start(): Promise<void> {
    for (const b of await this.o.store.listTemplateBuilds()) {
      if (b.status === "building" || (b.status === "waiting" && b.spec)) {
        await this.finish(b, "error", { message: "the build was interrupted by a restart of the server: build again" });
      }
    }
    void this.o.removeOrphans?.().catch((err: unknown) => this.o.log.warn({ err }, "removing images of gone templates failed"));
  }

  // --- names and resolution -------------------------------------------------

  /** The template a reference names (id or name; namespace ignored), built-ins included. */
  private async find(ref: TemplateRef): Promise<TemplateRecord | undefined> {
    return builtInTemplate(this.o.catalog, this.o.defaults, ref.base) ?? (await this.o.store.templateByName(ref.base)) ?? (isTemplateId(ref.base) ? await this.o.store.getTemplate(ref.base) : undefined);
  }

  private parse(raw: string): TemplateRef {
    const r = parseTemplateRef(raw);
    if ("problem" in r) throw new ControlPlaneError("invalid", r.problem);
    return r;
  }

  /** A template by reference, or not_found. */
  async get(raw: string): Promise<TemplateView> {
    return this.view((await this.named(raw)).t);
  }

  private async view(t: TemplateRecord): Promise<TemplateView> {
    if (t.builtIn) {
      const build = builtInBuild(this.o.catalog, this.o.defaults, t);
      return { template: t, builds: build ? [build] : [], tags: build ? [{ templateId: t.id, tag: DEFAULT_TAG, buildId: build.id, createdAt: build.createdAt }] : [] };
    }
    return { template: t, builds: await this.o.store.listTemplateBuilds(t.id), tags: await this.o.store.listTemplateTags(t.id) };
  }

  /** Every template: the built-in ones first, then those built through the API, oldest first. */
  async list(): Promise<TemplateView[]> {
    const builtIn = this.o.catalog.names().flatMap((n) => builtInTemplate(this.o.catalog, this.o.defaults, n) ?? []);
    return Promise.all([...builtIn, ...(await this.o.store.listTemplates())].map((t) => this.view(t)));
  }

  /** GET /templates/aliases/{alias}: E2B's Template.exists. */
  async alias(raw: string): Promise<{ templateID: string; public: boolean } | undefined> {
    const r = parseTemplateRef(raw);
    if ("problem" in r) return undefined;
    const t = await this.find(r);
    return t ? { templateID: t.id, public: t.public } : undefined;
  }

  async resolve(raw: string): Promise<ResolvedTemplate | undefined> {
    const r = parseTemplateRef(raw);
    if ("problem" in r) return undefined;
    const t = await this.find(r);
    if (!t) return undefined;
    const build = await this.taggedBuild(t, r.tag ?? DEFAULT_TAG);
    if (!build?.result) return undefined;
    const { rootfsBytes: _size, ...boot } = build.result;
    if (!t.builtIn) await this.countSpawn(t.id);
    const alias = t.names.includes(r.base) ? r.base : t.names[0];
    return { templateId: t.id, ...(alias ? { alias } : {}), boot, cpuCount: t.cpuCount, memoryMB: t.memoryMB };
  }

  /** What a template reference boots (a build's base), without counting a spawn. */
  async baseOf(raw: string): Promise<SandboxBoot | undefined> {
    const r = parseTemplateRef(raw);
    if ("problem" in r) return undefined;
    const t = await this.find(r);
    const result = t ? (await this.taggedBuild(t, r.tag ?? DEFAULT_TAG))?.result : undefined;
    if (!result) return undefined;
    const { rootfsBytes: _size, ...boot } = result;
    return boot;
  }

  pending(raw: string): string | undefined {
    const started = buildingInBackground.get(raw);
    if (started === undefined) return undefined;
    return `template '${raw}' is being built for its first use on this server (started ${Math.round((Date.now() - started) / 1000)} s ago; it takes a few minutes, once): try again shortly`;
  }

  async names(): Promise<string[]> {
    return [...new Set([...this.o.catalog.names(), ...(await this.o.store.listTemplates()).flatMap((t) => t.names)])].sort();
  }

  /** A create from the template: its spawn count and last spawn (read afresh under the lock: creates run in parallel). */
  private countSpawn(id: string): Promise<void> {
    return this.exclusive(async () => {
      const t = await this.o.store.getTemplate(id);
      if (t) await this.o.store.putTemplate({ ...t, spawnCount: t.spawnCount + 1, lastSpawnedAt: Date.now() });
    });
  }

  /** Changes to templates, one at a time: each reads, checks and writes several records. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return this.lock.run("templates", fn);
  }

  private taggedBuild(t: TemplateRecord, tag: string): Promise<TemplateBuildRecord | undefined> {
    return taggedBuild(this.o, t, tag);
  }

  /** The template `raw` names, with the reference, or not_found. */
  private async named(raw: string): Promise<{ ref: TemplateRef; t: TemplateRecord }> {
    const ref = this.parse(raw);
    const t = await this.find(ref);
    if (!t) throw new ControlPlaneError("not_found", `template '${printable(raw)}' not found`);
    return { ref, t };
  }

  // --- builds ---------------------------------------------------------------

  /**
   * POST /v3/templates (and /v2): a template (new, or the one of that name)
   * and a build waiting for its start. `name` may carry a tag (`name:tag`).
   */
  requestBuild(input: { name: string; tags?: string[]; cpuCount?: number; memoryMB?: number }): Promise<{ template: TemplateRecord; build: TemplateBuildRecord; tags: string[] }> {
    return this.exclusive(() => this.requestBuildLocked(input));
  }

  private async requestBuildLocked(input: { name: string; tags?: string[]; cpuCount?: number; memoryMB?: number }): Promise<{ template: TemplateRecord; build: TemplateBuildRecord; tags: string[] }> {
    const ref = this.parse(input.name);
    if (ref.base.startsWith("@") || this.o.catalog.has(ref.base)) {
      throw new ControlPlaneError("invalid", `template '${ref.base}' is built on the server from rootfs/templates/${ref.base}.yaml: build your own on top of it (Template().fromTemplate('${ref.base}')) under another name`);
    }
    if (await this.o.snapshotNamed?.(ref.base)) throw new ControlPlaneError("invalid", `a snapshot is named '${ref.base}': templates and snapshots share names, choose another`);
    const tags = [...new Set([...(ref.tag !== undefined ? [ref.tag] : []), ...(input.tags ?? [])])];
    for (const tag of tags) {
      const problem = tagProblem(tag);
      if (problem) throw new ControlPlaneError("invalid", problem);
    }
    if (tags.length === 0) tags.push(DEFAULT_TAG);
    const now = Date.now();
    const existing = (await this.o.store.templateByName(ref.base)) ?? (isTemplateId(ref.base) ? await this.o.store.getTemplate(ref.base) : undefined);
    for (const b of existing ? await this.o.store.listTemplateBuilds(existing.id) : []) {
      if (b.status === "building" || (b.status === "waiting" && b.spec)) {
        throw new ControlPlaneError("conflict", `template '${ref.base}' has a build under way (${b.id}): wait for it to finish, or delete the template to stop it`);
      }
      // Requested and never started: the new request replaces it.
      if (b.status === "waiting") await this.finish(b, "error", { message: "replaced by a newer build request before it was started" });
    }
    const cpuCount = input.cpuCount ?? existing?.cpuCount ?? this.o.defaults.cpuCount;
    const memoryMB = input.memoryMB ?? existing?.memoryMB ?? this.o.defaults.memoryMB;
    const template: TemplateRecord = existing
      ? { ...existing, cpuCount, memoryMB, updatedAt: now, buildCount: existing.buildCount + 1 }
      : {
          id: isTemplateId(ref.base) ? ref.base : newTemplateId(),
          names: isTemplateId(ref.base) ? [] : [ref.base],
          public: false,
          cpuCount,
          memoryMB,
          diskSizeMB: this.o.defaults.diskSizeMB,
          createdAt: now,
          updatedAt: now,
          spawnCount: 0,
          buildCount: 1,
        };
    const build: TemplateBuildRecord = {
      id: newBuildId(),
      templateId: template.id,
      status: "waiting",
      cpuCount,
      memoryMB,
      diskSizeMB: template.diskSizeMB,
      tags,
      envdVersion: ENVD_VERSION,
      createdAt: now,
      updatedAt: now,
    };
    await this.o.store.putTemplate(template);
    await this.o.store.putTemplateBuild(build);
    this.o.log.info({ templateId: template.id, buildId: build.id, name: ref.base, tags }, "template build requested");
    return { template, build, tags };
  }

  /** A build of a template (by reference), or not_found. */
  async build(templateRef: string, buildId: string): Promise<{ template: TemplateRecord; build: TemplateBuildRecord }> {
    const view = await this.get(templateRef);
    const build = view.builds.find((b) => b.id === buildId);
    if (!build) throw new ControlPlaneError("not_found", `build '${printable(buildId)}' of template '${printable(templateRef)}' not found`);
    return { template: view.template, build };
  }

  /** POST /v2/templates/{id}/builds/{buildID}: checks the spec and queues the build. */
  startBuild(templateRef: string, buildId: string, start: BuildStart): Promise<void> {
    return this.exclusive(() => this.startBuildLocked(templateRef, buildId, start));
  }

  private async startBuildLocked(templateRef: string, buildId: string, start: BuildStart): Promise<void> {
    const { template, build } = await this.build(templateRef, buildId);
    if (template.builtIn) throw new ControlPlaneError("invalid", `template '${template.id}' is built on the server; it takes no builds through the API`);
    if (build.status !== "waiting" || build.spec) throw new ControlPlaneError("conflict", `build ${build.id} was already started (it is ${build.status}): request a new build`);
    const fromTemplate = start.spec.fromTemplate !== undefined ? await this.checkBase(start.spec.fromTemplate, template) : undefined;
    checkBuildSpec(start.spec, { fileKnown: (hash) => this.o.files.path(hash) !== undefined, fromTemplate: () => fromTemplate });
    if (!this.runner) throw new ControlPlaneError("unavailable", "template builds are not available on this server");
    const next = { ...build, spec: start.spec, updatedAt: Date.now() };
    await this.o.store.putTemplateBuild(next);
    const log = this.logOf(next);
    log.add({ timestamp: Date.now(), level: "info", message: `build ${build.id} of template ${template.id} queued` });
    this.runner.enqueue(next, start, log);
  }

  /** Why `fromTemplate` cannot be built on, or undefined. */
  private async checkBase(raw: string, building: TemplateRecord): Promise<string | undefined> {
    const r = parseTemplateRef(raw);
    if ("problem" in r) return r.problem;
    const t = await this.find(r);
    if (!t) return `base template '${printable(raw)}' not found`;
    if (t.id === building.id) return `a template cannot be built from itself ('${printable(raw)}')`;
    if (!(await this.taggedBuild(t, r.tag ?? DEFAULT_TAG))?.result) return `base template '${printable(raw)}' has no ready build${r.tag ? ` tagged '${r.tag}'` : ""}`;
    return undefined;
  }

  /** Updates a build as it runs (the runner calls it), and on `ready` points its tags at it. */
  update(buildId: string, change: Partial<Pick<TemplateBuildRecord, "status" | "reason" | "result">>): Promise<TemplateBuildRecord | undefined> {
    return this.exclusive(async () => {
      const b = await this.o.store.getTemplateBuild(buildId);
      if (!b) return undefined;
      if (change.status === "ready" || change.status === "error") return this.finish(b, change.status, change.reason, change.result);
      const next = { ...b, ...change, updatedAt: Date.now() };
      await this.o.store.putTemplateBuild(next);
      return next;
    });
  }

  private async finish(b: TemplateBuildRecord, status: "ready" | "error", reason?: TemplateBuildRecord["reason"], result?: TemplateBuildRecord["result"]): Promise<TemplateBuildRecord> {
    const now = Date.now();
    const next: TemplateBuildRecord = { ...b, status, updatedAt: now, finishedAt: now, ...(reason ? { reason } : {}), ...(result ? { result } : {}) };
    await this.o.store.putTemplateBuild(next);
    if (status === "ready") {
      for (const tag of b.tags) await this.o.store.putTemplateTag({ templateId: b.templateId, tag, buildId: b.id, createdAt: now });
      const t = await this.o.store.getTemplate(b.templateId);
      if (t) await this.o.store.putTemplate({ ...t, cpuCount: b.cpuCount, memoryMB: b.memoryMB, updatedAt: now });
      // After the lock is let go: the pruning's own writes take it.
      setImmediate(() => void this.pruneImages(b.templateId).catch((err: unknown) => this.o.log.warn({ err, templateId: b.templateId }, "pruning untagged images failed")));
    }
    const log = this.openLogs.get(b.id);
    if (log) {
      log.add({ timestamp: now, level: status === "ready" ? "info" : "error", message: status === "ready" ? "build ready" : `build failed: ${reason?.message ?? "unknown error"}`, step: reason?.step });
      log.release();
      this.openLogs.delete(b.id);
    }
    this.o.log.info({ templateId: b.templateId, buildId: b.id, status, reason: reason?.message }, "template build finished");
    return next;
  }

  /**
   * Removes the images of a template's builds no tag points at any more (a
   * rebuild moved them) and no sandbox or snapshot boots: their records stay,
   * as history.
   */
  private async pruneImages(templateId: string): Promise<void> {
    const tagged = new Set((await this.o.store.listTemplateTags(templateId)).map((t) => t.buildId));
    for (const b of await this.o.store.listTemplateBuilds(templateId)) {
      if (!b.result || tagged.has(b.id) || b.imageRemoved || (await this.o.imageInUse?.(b.result.image))) continue;
      try {
        const kept = (await this.o.removeImage?.(b.result.image)) ?? [];
        if (kept.length) {
          // A build sandbox (never in the store) or a sandbox started meanwhile runs on it: the next prune tries again.
          this.o.log.info({ templateId, buildId: b.id, image: b.result.image, kept }, "the image of a build no tag points at is still in use: kept");
          continue;
        }
        await this.exclusive(async () => {
          const cur = await this.o.store.getTemplateBuild(b.id);
          if (cur) await this.o.store.putTemplateBuild({ ...cur, imageRemoved: true });
        });
        this.o.log.info({ templateId, buildId: b.id, image: b.result.image }, "removed the image of a build no tag points at");
      } catch (err) {
        this.o.log.warn({ err, image: b.result.image }, "removing an untagged build's image failed");
      }
    }
  }

  /** A build's log (in memory while the build runs): `build` is its record as just read. */
  logOf(build: Pick<TemplateBuildRecord, "id" | "status">): BuildLog {
    let log = this.openLogs.get(build.id);
    if (!log) {
      log = new BuildLog(`${this.o.dataDir}/template-builds/${build.id}.jsonl`);
      if (build.status === "waiting" || build.status === "building") this.openLogs.set(build.id, log);
    }
    return log;
  }

  /** GET .../status: the build and its log entries from `offset` (at most `limit`, at least `level`). */
  async status(templateRef: string, buildId: string, o: { offset: number; limit: number; level?: BuildLogEntry["level"] }): Promise<{ build: TemplateBuildRecord; entries: BuildLogEntry[]; reasonEntries: BuildLogEntry[] }> {
    const { build } = await this.build(templateRef, buildId);
    const { entries, reasonEntries } = statusPage(build, this.logOf(build).all(), o);
    return { build, entries, reasonEntries };
  }

  /** GET .../logs: entries from a timestamp cursor, forward or backward. */
  async logs(templateRef: string, buildId: string, o: { cursor?: number; limit: number; direction: "forward" | "backward"; level?: BuildLogEntry["level"] }): Promise<BuildLogEntry[]> {
    const { build } = await this.build(templateRef, buildId);
    return logsPage(this.logOf(build).all(), o);
  }

  // --- changes --------------------------------------------------------------

  /** PATCH /templates/{id}: whether every key may create from it (there is one team here: it changes what the API shows). */
  setPublic(templateRef: string, isPublic: boolean | undefined): Promise<TemplateRecord> {
    return this.exclusive(async () => {
      const t = (await this.get(templateRef)).template;
      if (t.builtIn) throw new ControlPlaneError("invalid", `template '${t.id}' is built on the server and is always public`);
      const next = { ...t, ...(isPublic !== undefined ? { public: isPublic } : {}), updatedAt: Date.now() };
      await this.o.store.putTemplate(next);
      return next;
    });
  }

  /** DELETE /templates/{id}: its builds stop, its images go; refused while sandboxes or snapshots use it. */
  async delete(templateRef: string): Promise<void> {
    const { template: t, builds } = await this.exclusive(() => this.deleteLocked(templateRef));
    for (const b of builds) {
      if (b.result) await this.o.removeImage?.(b.result.image).catch((err: unknown) => this.o.log.warn({ err, image: b.result!.image }, "removing a template's image failed"));
    }
    this.o.log.info({ templateId: t.id, builds: builds.length }, "template deleted");
  }

  /** The template's records go (its images after, outside the lock). */
  private async deleteLocked(templateRef: string): Promise<TemplateView> {
    const view = await this.get(templateRef);
    const { template: t, builds } = view;
    if (t.builtIn) throw new ControlPlaneError("invalid", `template '${t.id}' is built on the server from rootfs/templates/${t.id}.yaml: remove it there ('locale2b template' on the server)`);
    for (const b of builds) {
      const user = b.result ? await this.o.imageInUse?.(b.result.image) : undefined;
      if (user) throw new ControlPlaneError("conflict", `template '${t.names[0] ?? t.id}' is still used by ${user}: kill those sandboxes and delete those snapshots first`);
    }
    for (const b of builds) this.runner?.cancel(b.id);
    await this.o.store.deleteTemplate(t.id);
    for (const b of builds) {
      this.logOf(b).remove();
      this.openLogs.delete(b.id);
    }
    return view;
  }

  /** POST /templates/tags: `target` is `name:tag` (or `name`, the default tag): its build gets `tags` too. */
  assignTags(target: string, tags: string[]): Promise<{ buildId: string; tags: string[] }> {
    return this.exclusive(async () => {
      const { ref, t } = await this.named(target);
      return assignTags(this.o, t, target, ref.tag ?? DEFAULT_TAG, tags);
    });
  }

  /** DELETE /templates/tags. */
  deleteTags(name: string, tags: string[]): Promise<void> {
    return this.exclusive(async () => deleteTags(this.o.store, (await this.named(name)).t, name, tags));
  }

  /** GET /templates/{id}/files/{hash}: whether the files are here, and where to upload them if not. */
  async fileUpload(templateRef: string, hash: string, baseUrl: string): Promise<{ present: boolean; url?: string }> {
    const t = (await this.get(templateRef)).template;
    if (t.builtIn) throw new ControlPlaneError("invalid", `template '${t.id}' is built on the server; it takes no files`);
    const present = this.o.files.path(hash) !== undefined;
    if (present) this.o.files.touch(hash);
    return present ? { present } : { present, url: this.o.files.uploadUrl(baseUrl, t.id, hash) };
  }

  /** Whether `templateId` is a template whose files may be uploaded (the PUT names it by id). */
  async acceptsFiles(templateId: string): Promise<boolean> {
    return !!(await this.o.store.getTemplate(templateId));
  }
}
