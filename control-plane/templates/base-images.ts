// fromImage: an image from a registry, pulled (images/oci) and made runnable
// as a sandbox (locale2b's envd, Node, init and sandbox user added to a copy
// of its root), kept in the image cache by its digest and what was added, so
// a second build from the same image starts at once. Its ENV is kept; its
// WORKDIR and USER too when it sets them (else E2B's /home/user and `user`).
import { createHash } from "node:crypto";
import type { Logger } from "pino";
import { ensureEnvdBundle } from "../images/envd-bundle.js";
import { ensureInitBinary } from "../images/guest-init.js";
import { findTemplateImage, GUEST } from "../images/layout.js";
import { pullImage, ImagePullError } from "../images/oci/pull.js";
import { mustRun } from "../images/template-exec.js";
import { guestRuntimeHash } from "../images/guest-runtime.js";
import type { RegistryAuth } from "../domain/template.js";
import type { PulledBase } from "./builder.js";
import { BuildFailure } from "./builder.js";
import { imageWorkDir, provisionGuest, publishImage } from "./image-output.js";
import { rmSync } from "node:fs";
import { utimes } from "node:fs/promises";

/** Bumped when what is added to a pulled image changes. */
const PROVISION_VERSION = 4;

/** A USER the sandbox can use as its default user: a name (not a uid), and not root (E2B's default user is `user`). */
function defaultUser(user: string): string {
  const name = user.split(":")[0]!;
  return name && name !== "root" && !/^\d+$/.test(name) ? name : GUEST.user;
}

export async function pullBase(
  o: { imagesDir: string; ref: string; auth: RegistryAuth | undefined; signal: AbortSignal; say: (m: string) => void; ext4: boolean; diskSizeMB: number; log: Logger },
): Promise<PulledBase> {
  const pulled = await pullImage({ ref: o.ref, auth: o.auth, imagesDir: o.imagesDir, log: o.log, signal: o.signal }).catch((err: Error) => {
    throw new BuildFailure(err instanceof ImagePullError ? err.message : `pulling ${o.ref} failed: ${err.message}`, "base");
  });
  o.say(`${o.ref}: ${pulled.digest}${pulled.cached ? " (cached)" : ` from ${pulled.source}`}`);
  const [bundle, init] = await Promise.all([ensureEnvdBundle(o.imagesDir), ensureInitBinary(o.imagesDir)]);
  const runtime = await guestRuntimeHash(o.imagesDir, bundle);
  const key = createHash("sha256").update(JSON.stringify({ v: PROVISION_VERSION, digest: pulled.digest, envd: bundle.hash16, runtime, init, ext4: o.ext4 })).digest("hex").slice(0, 16);
  const image = `@oci-${key}`;
  const existing = findTemplateImage(image, o.imagesDir);
  // Used now: its age is what the clean-up of base images unused for a week reads.
  if (existing) await utimes(existing.dir, new Date(), new Date()).catch(() => undefined);
  if (!existing) {
    o.say("adding locale2b's envd and init to the image");
    const work = await imageWorkDir(o.imagesDir, image);
    try {
      // A copy: the pulled root is shared by every pull of the image.
      await mustRun("copy the pulled image", "cp", ["-a", "--reflink=auto", "--", `${pulled.rootfsDir}/.`, work.rootfs]);
      await provisionGuest(o.imagesDir, work.rootfs);
      await publishImage(o.imagesDir, work, image, { ext4: o.ext4, diskSizeMB: o.diskSizeMB, description: { from: o.ref, digest: pulled.digest } });
    } catch (err) {
      rmSync(work.dir, { recursive: true, force: true });
      throw new BuildFailure(`making ${o.ref} runnable failed: ${(err as Error).message}`, "base");
    }
  }
  const { env, workdir, user } = pulled.config;
  return {
    image,
    key: `${pulled.digest}:${key}`,
    boot: {
      image,
      envs: env,
      user: defaultUser(user),
      workdir: workdir && workdir !== "/" ? workdir : GUEST.home,
    },
  };
}
