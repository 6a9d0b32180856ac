#!/usr/bin/env bash
# Build gVisor's runsc from the Go module proxy (gvisor.dev/gvisor, the go-gettable source of gVisor's
# master) at a pinned version, once, into a cache outside the clone:
#
#   $LOCALE2B_CACHE_DIR/runsc/<version>/runsc
#
# scripts/setup-host installs it as runsc (beside its other tools) when the runsc it finds is older. Why build
# it: Debian's runsc (0.0~20240729) lets a burst of processes over a sandbox's memory end the whole sandbox,
# and restores slowly; this one contained every burst tried here and resumes about 3x faster
# (docs/runtimes.md, "A newer runsc").
#
# About 70 s with empty Go caches on 2 shared cores (a 21 MB module and its dependencies, then the build); a
# complete cache directory is printed at once. A lock (flock) makes a second concurrent run wait for the first.
# Prints the runsc binary's path as the last line of stdout; progress on stderr. Environment:
# LOCALE2B_RUNSC_VERSION (default below: the module's pseudo-version of 2026-09-05), LOCALE2B_CACHE_DIR
# (default ~/.cache/locale2b). Needs Go >= 1.26.3 on PATH (or /usr/local/go/bin).
set -euo pipefail

VERSION=${LOCALE2B_RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
ROOT=${LOCALE2B_CACHE_DIR:-$HOME/.cache/locale2b}/runsc
OUT=$ROOT/$VERSION

say() { printf 'build-runsc: %s\n' "$*" >&2; }
complete() { [[ -f $OUT/.complete && -x $OUT/runsc ]]; }
if complete; then echo "$OUT/runsc"; exit 0; fi

PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { say "go is not on PATH (runsc $VERSION needs Go >= 1.26.3)"; exit 3; }
mkdir -p "$ROOT"
exec 9>"$OUT.lock"
if ! flock -n 9; then
  say "another build of $OUT is running; waiting for it"
  flock 9
fi
if complete; then echo "$OUT/runsc"; exit 0; fi

# gVisor's go.mod has no replace lines, so `go install module/pkg@version` builds it as published. The version
# string runsc prints (and `locale2b doctor` shows) says where it came from: the module version's date.
date=$(sed -E 's/^v0\.0\.0-([0-9]{8}).*/\1/' <<<"$VERSION")
export CGO_ENABLED=0 GOWORK=off
mkdir -p "$OUT"
T0=$(date +%s)
say "building gvisor.dev/gvisor/runsc@$VERSION through $(go env GOPROXY) (CGO_ENABLED=0)"
rm -rf "$OUT/gobin"
GOBIN=$OUT/gobin go install -trimpath -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=0.0~$date.0-go" "gvisor.dev/gvisor/runsc@$VERSION" >&2
mv "$OUT/gobin/runsc" "$OUT/runsc"
rmdir "$OUT/gobin"
"$OUT/runsc" --version >&2 || { say "the built runsc does not run"; exit 3; }
printf 'version %s\nbuilt %s\ntotal %ss\n' "$VERSION" "$(date -u +%FT%TZ)" "$(($(date +%s) - T0))" >"$OUT/build-times.txt"
touch "$OUT/.complete"
say "done in $(($(date +%s) - T0))s: $OUT/runsc"
echo "$OUT/runsc"
