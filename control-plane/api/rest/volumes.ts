// E2B's /volumes: create, list, get, destroy (the SDKs' Volume.create,
// Volume.list, Volume.getInfo/connect, Volume.destroy). A volume's answer
// carries its token, for the volume file API (volume-content.ts).
import type { VolumeRecord } from "../../domain/volume.js";
import type { VolumeService } from "../../volumes/volume-service.js";
import { Fields, readJsonObject } from "./body.js";
import { HttpError, sendJson, sendNoContent } from "./errors.js";
import type { RestContext, Route } from "./router.js";

export function volumesOf(ctx: RestContext): VolumeService {
  if (!ctx.deps.volumes) throw new HttpError(404, "volumes are not served by this server");
  return ctx.deps.volumes;
}

/** E2B's VolumeAndToken (plus our sizeMB). */
function withToken(v: VolumeRecord, volumes: VolumeService): Record<string, unknown> {
  return { volumeID: v.id, name: v.name, token: volumes.token(v.id), sizeMB: v.sizeMB };
}

async function create(ctx: RestContext): Promise<void> {
  const volumes = volumesOf(ctx);
  const body = await readJsonObject(ctx.req);
  const f = new Fields(body);
  // `sizeMB` is ours (E2B's NewVolume has only a name): the volume's size limit.
  const v = await volumes.create(body.name, f.int("sizeMB"));
  sendJson(ctx.res, 201, withToken(v, volumes));
}

async function list(ctx: RestContext): Promise<void> {
  sendJson(ctx.res, 200, (await volumesOf(ctx).list()).map((v) => ({ volumeID: v.id, name: v.name, sizeMB: v.sizeMB })));
}

async function get(ctx: RestContext): Promise<void> {
  const volumes = volumesOf(ctx);
  sendJson(ctx.res, 200, withToken(await volumes.get(ctx.params.volumeID!), volumes));
}

async function destroy(ctx: RestContext): Promise<void> {
  await volumesOf(ctx).destroy(ctx.params.volumeID!);
  sendNoContent(ctx.res);
}

export const volumeRoutes: Route[] = [
  { method: "POST", path: "/volumes", handler: create },
  { method: "GET", path: "/volumes", handler: list },
  { method: "GET", path: "/volumes/:volumeID", handler: get },
  { method: "DELETE", path: "/volumes/:volumeID", handler: destroy },
];
