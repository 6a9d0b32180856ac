#!/usr/bin/env bash
# Build kwok (sigs.k8s.io/kwok, the controller that simulates Nodes and Pods against a real apiserver; not
# kwokctl, which wants Docker or release downloads) from the Go module proxy, once per version, into a cache
# outside the clone:
#
#   $LOCALE2B_CACHE_DIR/k8s-kwok/<version>-<first 12 hex of sha256 of this script>/
#     kwok              the controller
#     node-stages.yaml  its Stages that make a managed Node Ready and keep it so (node-initialize and
#                       node-heartbeat-with-lease, copied from the same module version: the controller
#                       alone has none built in; kwokctl writes these for its clusters)
#
# Separate from build-binaries.sh on purpose: that script's hash keys the (15-minute) cluster build, and kwok
# is cheap by comparison (a few minutes cold, seconds with the Go build cache warm).
#
# Idempotent: a complete cache directory is printed at once; a lock (flock) makes a second concurrent run wait
# for the first and reuse its result. Prints the kwok binary's path as the last line of stdout; progress on
# stderr. Environment: LOCALE2B_KWOK_VERSION (default v0.8.0), LOCALE2B_CACHE_DIR (default ~/.cache/locale2b).
set -euo pipefail

VERSION=${LOCALE2B_KWOK_VERSION:-v0.8.0}
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
KEY=$(sha256sum "$HERE/build-kwok.sh" | cut -c1-12)
ROOT=${LOCALE2B_CACHE_DIR:-$HOME/.cache/locale2b}/k8s-kwok
OUT=$ROOT/$VERSION-$KEY

say() { printf 'build-kwok: %s\n' "$*" >&2; }
complete() { [[ -f $OUT/.complete && -x $OUT/kwok && -f $OUT/node-stages.yaml ]]; }
if complete; then echo "$OUT/kwok"; exit 0; fi

command -v go >/dev/null || { say "go is not on PATH (kwok $VERSION needs Go >= 1.26)"; exit 3; }
mkdir -p "$ROOT"
exec 9>"$OUT.lock"
if ! flock -n 9; then
  say "another build of $OUT is running; waiting for it"
  flock 9
fi
if complete; then echo "$OUT/kwok"; exit 0; fi

# kwok's go.mod has no replace lines, so `go install module/cmd@version` builds it as released. GOTOOLCHAIN is
# left to the caller: kwok v0.8.0 needs go >= 1.26.0 (export GOTOOLCHAIN=go1.27.3 to fetch a newer one).
export GOFLAGS="-p=1 ${GOFLAGS:-}" CGO_ENABLED=0 GOWORK=off
mkdir -p "$OUT"
T0=$(date +%s)
say "building sigs.k8s.io/kwok/cmd/kwok@$VERSION through $(go env GOPROXY) (GOFLAGS=$GOFLAGS CGO_ENABLED=0)"
rm -rf "$OUT/gobin"
GOBIN=$OUT/gobin go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$VERSION" >&2
mv "$OUT/gobin/kwok" "$OUT/kwok"
rmdir "$OUT/gobin"
"$OUT/kwok" --version >&2 || { say "the built kwok does not run"; exit 3; }
src=$(go mod download -json "sigs.k8s.io/kwok@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
stages=$src/kustomize/stage/node
[[ -f $stages/fast/node-initialize.yaml && -f $stages/heartbeat-with-lease/node-heartbeat-with-lease.yaml ]] ||
  { say "no node Stages under $stages"; exit 3; }
{ cat "$stages/fast/node-initialize.yaml"; echo "---"; cat "$stages/heartbeat-with-lease/node-heartbeat-with-lease.yaml"; } >"$OUT/node-stages.yaml"
printf 'version %s\nbuilt %s\ntotal %ss\n' "$VERSION" "$(date -u +%FT%TZ)" "$(($(date +%s) - T0))" >"$OUT/build-times.txt"
touch "$OUT/.complete"
say "done in $(($(date +%s) - T0))s: $OUT/kwok"
echo "$OUT/kwok"
