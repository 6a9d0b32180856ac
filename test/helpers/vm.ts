import { homedir } from "node:os";
import { join } from "node:path";
import { findKernel, findTemplateImage } from "../../control-plane/images/layout.js";
import { findExecutable } from "../../control-plane/host/executables.js";

/** The image cache the tests use: $LOCALE2B_IMAGES_DIR (npm test sets it), else ~/.cache/locale2b/images. */
export function testImagesDir(): string {
  return process.env.LOCALE2B_IMAGES_DIR || join(homedir(), ".cache", "locale2b", "images");
}

/** Why the qemu suite cannot run here, or undefined when it can. */
export function qemuMissing(dir = testImagesDir()): string | undefined {
  const missing: string[] = [];
  if (!findExecutable("qemu-system-x86_64", process.env.LOCALE2B_QEMU)) missing.push("qemu-system-x86_64 (scripts/setup-host)");
  if (!findExecutable("qemu-img", process.env.LOCALE2B_QEMU_IMG)) missing.push("qemu-img (scripts/setup-host)");
  if (!findExecutable("vhost-device-vsock", process.env.LOCALE2B_VHOST_VSOCK)) missing.push("vhost-device-vsock (scripts/setup-host)");
  if (!findKernel({ ...process.env, LOCALE2B_IMAGES_DIR: dir }, dir)) missing.push(`a guest kernel in ${dir} (scripts/build-kernel.sh)`);
  if (!findTemplateImage("base", dir)) missing.push(`the base template in ${dir} (locale2b template build base)`);
  return missing.length ? `the qemu suite needs ${missing.join(", ")}` : undefined;
}
