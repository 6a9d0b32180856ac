// A template's tags (E2B's `name:tag`): which build each names, and the tag
// routes' checks and writes. A built-in template has only the default tag,
// on its one build. The caller holds the templates lock (template-service.ts).
import { ControlPlaneError } from "../domain/errors.js";
import type { TemplateBuildRecord, TemplateRecord } from "../domain/template.js";
import type { TemplateCatalog } from "../images/catalog.js";
import type { Store } from "../store/store.js";
import { builtInBuild, type BuiltInDefaults } from "./built-in-templates.js";
import { DEFAULT_TAG, printable, tagProblem } from "./names.js";

export interface TagDeps {
  store: Store;
  catalog: TemplateCatalog;
  defaults: BuiltInDefaults;
}

/** The build a tag of a template points at. */
export async function taggedBuild(d: TagDeps, t: TemplateRecord, tag: string): Promise<TemplateBuildRecord | undefined> {
  if (t.builtIn) return tag === DEFAULT_TAG ? builtInBuild(d.catalog, d.defaults, t) : undefined;
  const rec = await d.store.getTemplateTag(t.id, tag);
  return rec ? d.store.getTemplateBuild(rec.buildId) : undefined;
}

/** POST /templates/tags: the ready build `tag` of `t` names (`target` as the caller wrote it) gets `tags` too. */
export async function assignTags(d: TagDeps, t: TemplateRecord, target: string, tag: string, tags: string[]): Promise<{ buildId: string; tags: string[] }> {
  if (t.builtIn) throw new ControlPlaneError("invalid", `template '${t.id}' is built on the server: it has only the tag '${DEFAULT_TAG}'`);
  if (tags.length === 0) throw new ControlPlaneError("invalid", "no tags given");
  for (const x of tags) {
    const problem = tagProblem(x);
    if (problem) throw new ControlPlaneError("invalid", problem);
  }
  const build = await taggedBuild(d, t, tag);
  if (!build || build.status !== "ready") throw new ControlPlaneError("not_found", `template '${printable(target)}' has no ready build to tag`);
  const now = Date.now();
  for (const x of tags) await d.store.putTemplateTag({ templateId: t.id, tag: x, buildId: build.id, createdAt: now });
  return { buildId: build.id, tags };
}

/** DELETE /templates/tags: every one of `tags` must exist, or none is removed. */
export async function deleteTags(store: Store, t: TemplateRecord, name: string, tags: string[]): Promise<void> {
  if (t.builtIn) throw new ControlPlaneError("invalid", `template '${t.id}' is built on the server: its tag cannot be removed`);
  if (tags.length === 0) throw new ControlPlaneError("invalid", "no tags given");
  const missing: string[] = [];
  for (const tag of tags) if (!(await store.getTemplateTag(t.id, tag))) missing.push(tag);
  if (missing.length) throw new ControlPlaneError("not_found", `template '${printable(name)}' has no tag ${missing.map((m) => `'${printable(m)}'`).join(", ")}`);
  for (const tag of tags) await store.deleteTemplateTag(t.id, tag);
}
