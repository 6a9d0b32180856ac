#!/usr/bin/env bash
# A real Kubernetes test cluster on this machine (test/helpers/k8s/): etcd, kube-apiserver,
# controller-manager, scheduler, and N nodes (containerd + kubelet + kube-proxy each in its own network
# namespace), under /tmp/locale2b-k8s-<name>.
#
#   scripts/k8s/cluster.sh up [--name dev] [--nodes 2] [--replace]
#   scripts/k8s/cluster.sh status [--name dev]
#   scripts/k8s/cluster.sh kubectl [--name dev] -- get pods -A -o wide
#   scripts/k8s/cluster.sh import IMAGE.tar [--name dev]
#   scripts/k8s/cluster.sh stop-node node2 [--name dev]    # lose a node (SIGKILL); start-node brings it back
#   scripts/k8s/cluster.sh down [--name dev] [--keep-state]
#   scripts/k8s/cluster.sh build          # build or find the binaries only
#   scripts/k8s/cluster.sh fleet [--name dev]   # up, the fleet from deploy/kubernetes on it, E2B env printed; Ctrl-C: down
#
# Needs root, scripts/k8s/setup-host.sh's packages, Go (first run: builds the binaries, see
# scripts/k8s/build-binaries.sh) and `npm ci` (it runs the TypeScript helper, bundled with esbuild).
set -euo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
[[ -x $REPO/node_modules/.bin/esbuild ]] || { echo "cluster.sh: run npm ci in $REPO first" >&2; exit 2; }
bundle=$(mktemp "${TMPDIR:-/tmp}/locale2b-k8s-cli.XXXXXX.mjs")
trap 'rm -f "$bundle"' EXIT
"$REPO/node_modules/.bin/esbuild" "$REPO/test/helpers/k8s/cli.ts" --bundle --platform=node --format=esm --target=node20 \
  --log-level=warning --outfile="$bundle" \
  '--banner:js=import { createRequire as __cr } from "node:module"; const require = __cr(import.meta.url);'

LOCALE2B_REPO=$REPO PATH="$PATH:/usr/local/go/bin" node "$bundle" "$@"
