// The template API's parts, made and joined for one server: the files of
// COPY steps, the step cache, the service the API calls, the builder and the
// queue that runs it.
import { createHmac } from "node:crypto";
import { join } from "node:path";
import type { Logger } from "pino";
import type { TemplateCatalog } from "../images/catalog.js";
import { findRuntime } from "../runtimes/registry.js";
import type { RuntimeSet } from "../runtimes/runtime-set.js";
import type { Store } from "../store/store.js";
import { pullBase } from "./base-images.js";
import { BuildQueue } from "./build-queue.js";
import { TemplateBuilder } from "./builder.js";
import { removeImage, removeOrphanImages } from "./image-output.js";
import { templateSettings, type TemplateSettings } from "./settings.js";
import { StepCache } from "./step-cache.js";
import { TemplateService, type TemplateDefaults } from "./template-service.js";
import { TemplateFiles } from "./uploads.js";

export interface Templates {
  service: TemplateService;
  settings: TemplateSettings;
  files: TemplateFiles;
  queue: BuildQueue;
  close(): Promise<void>;
}

export function createTemplates(o: {
  store: Store;
  catalog: TemplateCatalog;
  runtimes: RuntimeSet;
  imagesDir: string;
  dataDir: string;
  /** The server's secret; the upload URLs' key is derived from it. */
  seed: Buffer;
  defaults: TemplateDefaults;
  snapshotNamed: (name: string) => Promise<boolean>;
  /** An image's warm sandboxes go before the image does. */
  dropWarm?: (image: string) => Promise<void>;
  settings?: TemplateSettings;
  log: Logger;
}): Templates {
  const settings = o.settings ?? templateSettings();
  const key = createHmac("sha256", o.seed).update("template-files").digest();
  const files = new TemplateFiles(o.dataDir, key, { ttlSeconds: settings.uploadTtlSeconds, maxBytes: settings.uploadMaxBytes });
  const service = new TemplateService({
    store: o.store,
    catalog: o.catalog,
    files,
    dataDir: o.dataDir,
    defaults: o.defaults,
    snapshotNamed: o.snapshotNamed,
    imageInUse: async (image) => {
      const sandboxes = (await o.store.listSandboxes()).filter((s) => s.boot?.image === image);
      const snapshots = (await o.store.listSnapshots()).filter((s) => s.boot?.image === image);
      const parts = [
        ...(sandboxes.length ? [`${sandboxes.length} sandbox${sandboxes.length > 1 ? "es" : ""} (${sandboxes.slice(0, 3).map((s) => s.id).join(", ")})`] : []),
        ...(snapshots.length ? [`${snapshots.length} snapshot${snapshots.length > 1 ? "s" : ""}`] : []),
      ];
      return parts.length ? parts.join(" and ") : undefined;
    },
    removeOrphans: async () => {
      await removeOrphanImages(o.imagesDir, o.dataDir, async (buildId) => (await o.store.getTemplateBuild(buildId)) !== undefined, (line) => o.log.info(line));
    },
    removeImage: async (image) => {
      await o.dropWarm?.(image);
      return removeImage(o.imagesDir, image);
    },
    log: o.log,
  });
  const builder = new TemplateBuilder({
    imagesDir: o.imagesDir,
    dataDir: o.dataDir,
    runtimes: o.runtimes,
    files,
    cache: new StepCache(join(o.imagesDir, "template-cache"), settings.cacheBytes),
    baseOf: (ref) => service.baseOf(ref),
    pull: async (ref, auth, signal, say) =>
      pullBase({
        imagesDir: o.imagesDir,
        ref,
        auth,
        signal,
        say,
        ext4: findRuntime(o.runtimes.fallback.name)?.bootsDisk ?? false,
        diskSizeMB: o.defaults.diskSizeMB,
        log: o.log,
      }),
    buildDiskMB: settings.buildDiskMB,
    readyTimeoutMs: settings.readyTimeoutMs,
    log: o.log,
  });
  const queue = new BuildQueue(builder, (id, change) => void service.update(id, change), { concurrent: settings.concurrentBuilds, timeoutMs: settings.buildTimeoutMs }, o.log);
  service.setRunner(queue);
  return { service, settings, files, queue, close: () => queue.close() };
}
