import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { Filesystem } from "../../gen/ts/filesystem/filesystem_pb.js";
import { requestUser } from "../auth/user.js";
import type { EnvdContext } from "../context.js";
import { resolvePath } from "../paths.js";
import type { User } from "../users.js";
import { listDir, makeDir } from "./dir.js";
import { movePath } from "./move.js";
import { removePath } from "./remove.js";
import { statPath } from "./stat.js";
import { watchDir } from "./watch.js";
import { WatcherRegistry } from "./watchers.js";
import { FsAccess } from "../auth/fs-access.js";
import { guard } from "./errors.js";

/**
 * The `filesystem.Filesystem` service. Every path argument is resolved for
 * the calling user (`~`, relative to home, empty → default workdir).
 * `close()` stops every watcher.
 */
export function createFilesystemService(ctx: EnvdContext): { impl: ServiceImpl<typeof Filesystem>; close(): void } {
  const watchers = new WatcherRegistry(ctx.users, ctx.log);
  const streams = new Set<(err: ConnectError) => void>();
  const caller = (context: HandlerContext): User => requestUser(ctx, context);
  // Every call acts with the caller's permissions (envd itself runs as root).
  const access = new FsAccess(ctx.users);
  // Without a trailing slash, so names and paths come out as envd reports them.
  const resolve = (path: string, user: User): string => {
    const resolved = resolvePath(path, user, ctx.state.defaultWorkdir);
    return resolved.length > 1 ? resolved.replace(/\/+$/, "") || "/" : resolved;
  };

  const impl: ServiceImpl<typeof Filesystem> = {
    async stat(req, context) {
      const user = caller(context);
      const path = resolve(req.path, user);
      guard(() => access.check(user, path, "search"));
      return { entry: await statPath(ctx.users, path) };
    },
    async makeDir(req, context) {
      const user = caller(context);
      const path = resolve(req.path, user);
      guard(() => access.check(user, path, "write"));
      const entry = await makeDir(ctx.users, path, user);
      ctx.activity.emit({ case: "pathChanged", value: { op: "mkdir", path, user: user.name } });
      return { entry };
    },
    async move(req, context) {
      const user = caller(context);
      const [source, destination] = [resolve(req.source, user), resolve(req.destination, user)];
      guard(() => access.checkRemove(user, source));
      guard(() => access.check(user, destination, "write"));
      const entry = await movePath(ctx.users, source, destination, user);
      ctx.activity.emit({ case: "pathChanged", value: { op: "move", path: source, destination, user: user.name } });
      return { entry };
    },
    async listDir(req, context) {
      const user = caller(context);
      const path = resolve(req.path, user);
      guard(() => access.check(user, path, "list"));
      return { entries: await listDir(ctx.users, path, req.depth) };
    },
    async remove(req, context) {
      const user = caller(context);
      const path = resolve(req.path, user);
      guard(() => access.checkRemove(user, path));
      await removePath(path);
      ctx.activity.emit({ case: "pathChanged", value: { op: "remove", path, user: user.name } });
      return {};
    },
    async *watchDir(req, context) {
      const user = caller(context);
      const path = resolve(req.path, user);
      guard(() => access.check(user, path, "list"));
      yield* watchDir(ctx.users, path, req, context, streams);
    },
    async createWatcher(req, context) {
      const user = caller(context);
      const path = resolve(req.path, user);
      guard(() => access.check(user, path, "list"));
      const watcherId = await watchers.create(path, {
        recursive: req.recursive,
        includeEntry: req.includeEntry,
        allowNetworkMounts: req.allowNetworkMounts,
      });
      return { watcherId };
    },
    async getWatcherEvents(req) {
      return { events: await watchers.take(req.watcherId) };
    },
    async removeWatcher(req) {
      watchers.remove(req.watcherId);
      return {};
    },
  };
  return {
    impl,
    close() {
      watchers.close();
      const shutdown = new ConnectError("envd is shutting down", Code.Unavailable);
      for (const end of [...streams]) end(shutdown);
    },
  };
}
