import { homedir } from "node:os";
import { join } from "node:path";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Suites start real servers and processes; the machines have 2 cores.
    maxWorkers: 2,
    fileParallelism: true,
    // The guest-image cache npm test uses (scripts/test.mjs), for `npx vitest run` too: without it the
    // code's default as root is /var/lib/locale2b/images, whatever a server on this host left there.
    env: { LOCALE2B_IMAGES_DIR: process.env.LOCALE2B_IMAGES_DIR || join(homedir(), ".cache", "locale2b", "images") },
    tags: [
      {
        name: "k8s",
        description:
          "brings up a real Kubernetes cluster on this machine (a file's `// @module-tag k8s`; test/helpers/k8s/, scripts/k8s/): root, scripts/k8s/setup-host.sh's packages, and Go for the first build of the binaries",
      },
      {
        name: "host-envd",
        description:
          "runs envd on the host (a file's `// @module-tag host-envd`): with LOCALE2B_TEST_HOST_USER=1 scripts/test.mjs runs these again with a host account named `user` added, or removed if the host has one (scripts/host-user.sh, test/helpers/accounts.ts)",
      },
    ],
  },
});
