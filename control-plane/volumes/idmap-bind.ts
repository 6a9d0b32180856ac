// The id-mapped bind helper (native/idmap-bind.c) for runtimes that serve a
// volume with host ids unshifted (gVisor's gofer, qemu's virtiofsd): a bind of
// the volume whose on-disk ids base.. read as 0.., so `user` (1000) of those
// sandboxes owns the same files as `user` (base + 1000) of process sandboxes.
import { join } from "node:path";
import { ensureCompiled } from "../images/guest-init.js";
import { packageRoot } from "../runtimes/paths.js";
import { sandboxIdRange } from "../runtimes/process/id-map.js";

/** The helper for the current sources, compiled on first use into `<imagesDir>/host-tools/idmap-bind/<hash>/`. */
export function idmapHelper(imagesDir: string): Promise<string> {
  return ensureCompiled({
    sourceDir: join(packageRoot(), "control-plane", "volumes", "native"),
    cacheDir: join(imagesDir, "host-tools", "idmap-bind"),
    binaryName: "l2b-idmap-bind",
    what: "the volume id-map helper",
  });
}

/** `--shift BASE:COUNT`: the process runtime's sandbox ids. */
export function shiftArgs(): string[] {
  const { base, count } = sandboxIdRange();
  return ["--shift", `${base}:${count}`];
}
