#!/usr/bin/env bash
# Build the guest kernel: one uncompressed ELF vmlinux (PVH entry) that both
# QEMU `-M microvm` and Firecracker boot.
#
#   source  Debian's linux-source-6.1 package (installed with apt-get as root,
#           else `apt-get download` + `dpkg -x` into the user's cache)
#   config  rootfs/kernel/microvm-kernel-x86_64-6.1.config (Firecracker's CI
#           guest config) merged with rootfs/kernel/qemu-microvm.fragment
#   output  $LOCALE2B_IMAGES_DIR/kernels/<hash16>/vmlinux and kernels/current
#           (images dir default: <data dir>/images, as control-plane/images/layout.ts)
#
# hash16 = first 16 hex of sha256(config, fragment, package version, this script).
# When that kernel is already built it prints the path and exits at once.
# Progress goes to stderr; the vmlinux path is the last (only) line of stdout.
#
# Environment: LOCALE2B_IMAGES_DIR, LOCALE2B_DATA_DIR, LOCALE2B_KERNEL_JOBS
# (default: nproc), LOCALE2B_KERNEL_KEEP_BUILD=1 (keep the build tree).
# Options: --force (rebuild even when built), --print-hash, -h/--help.
set -euo pipefail

PKG=linux-source-6.1
SELF=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)
KDIR=$REPO/rootfs/kernel
CONFIG=$KDIR/microvm-kernel-x86_64-6.1.config
FRAGMENT=$KDIR/qemu-microvm.fragment
BUILD_DEPS=(make gcc libc6-dev bc flex bison libelf-dev libssl-dev perl xz-utils cpio)

: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
say() { printf 'build-kernel: %s\n' "$*" >&2; }
die() { printf 'build-kernel: error: %s\n' "$*" >&2; exit 1; }

FORCE=0 PRINT_HASH=0
for arg in "$@"; do
  case $arg in
    --force) FORCE=1 ;;
    --print-hash) PRINT_HASH=1 ;;
    -h|--help) sed -n '2,20p' "$SELF" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$arg' (try --help)" ;;
  esac
done

[[ -f $CONFIG ]] || die "missing $CONFIG (it is part of the repository)"
[[ -f $FRAGMENT ]] || die "missing $FRAGMENT (it is part of the repository)"

# --- where the kernel goes (same rule as control-plane/images/layout.ts) ---
images_dir() {
  if [[ -n ${LOCALE2B_IMAGES_DIR:-} ]]; then printf '%s\n' "$LOCALE2B_IMAGES_DIR"; return; fi
  local data=${LOCALE2B_DATA_DIR:-}
  if [[ -z $data ]]; then
    if [[ $(id -u) == 0 ]]; then data=/var/lib/locale2b
    elif [[ ${XDG_STATE_HOME:-} == /* ]]; then data=$XDG_STATE_HOME/locale2b
    else data=$HOME/.local/state/locale2b
    fi
  fi
  printf '%s/images\n' "$data"
}
IMAGES=$(images_dir)
KERNELS=$IMAGES/kernels

# --- the source package version: installed, else already downloaded (non-root),
# else apt's candidate. The kernel changes only when the source at hand does.
pkg_installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }
SRC_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/locale2b
cached_version() {
  local d
  d=$(ls -d "$SRC_CACHE/$PKG"-*/usr/src/"$PKG".tar.xz 2>/dev/null | sort -V | tail -n 1)
  [[ -n $d ]] || return 1
  d=${d#"$SRC_CACHE/$PKG-"}
  printf '%s\n' "${d%%/*}"
}
if pkg_installed "$PKG"; then
  VERSION=$(dpkg-query -W -f='${Version}' "$PKG")
elif [[ $(id -u) != 0 ]] && VERSION=$(cached_version); then
  :
else
  VERSION=$(apt-cache policy "$PKG" 2>/dev/null | awk '/Candidate:/ {print $2}')
  [[ -n $VERSION && $VERSION != "(none)" ]] ||
    die "apt knows no $PKG: run 'apt-get update' (Debian 12 bookworm sources with the security suite)"
fi

HASH=$( { cat "$CONFIG"; printf '\n--fragment--\n'; cat "$FRAGMENT"; printf '\n--version--\n%s\n--script--\n' "$VERSION"; cat "$SELF"; } |
  sha256sum | cut -c1-16)
if [[ $PRINT_HASH == 1 ]]; then echo "$HASH"; exit 0; fi
OUT=$KERNELS/$HASH/vmlinux

set_current() {
  local tmp=$KERNELS/.current.$$
  printf '%s\n' "$HASH" >"$tmp" && mv -f "$tmp" "$KERNELS/current"
}

if [[ $FORCE == 0 && -s $OUT ]]; then
  [[ $(cat "$KERNELS/current" 2>/dev/null) == "$HASH" ]] || set_current
  say "already built ($PKG $VERSION, hash $HASH)"
  echo "$OUT"
  exit 0
fi

# --- build tools and source ---
missing=()
for p in "${BUILD_DEPS[@]}"; do pkg_installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] ||
    die "missing build tools: ${missing[*]}; run: sudo apt-get install -y --no-install-recommends ${missing[*]}"
  say "installing build tools: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

SRC_TAR=
if pkg_installed "$PKG"; then
  SRC_TAR=/usr/src/$PKG.tar.xz
elif [[ $(id -u) == 0 ]]; then
  say "installing $PKG $VERSION (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$PKG=$VERSION" >&2
  SRC_TAR=/usr/src/$PKG.tar.xz
else
  cache=$SRC_CACHE/$PKG-$VERSION
  SRC_TAR=$cache/usr/src/$PKG.tar.xz
  if [[ ! -f $SRC_TAR ]]; then
    say "downloading $PKG $VERSION into $cache (apt-get download + dpkg -x)"
    dl=$(mktemp -d)
    (cd "$dl" && apt-get download -q "$PKG=$VERSION" >&2)
    mkdir -p "$cache"
    dpkg -x "$dl"/*.deb "$cache"
    rm -rf "$dl"
  fi
fi
[[ -f $SRC_TAR ]] || die "kernel source tarball $SRC_TAR not found after installing $PKG"

# --- build in a temporary directory ---
mkdir -p "$KERNELS"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/locale2b-kernel.XXXXXX")
STAGE=
cleanup() {
  local rc=$?
  [[ -n $STAGE ]] && rm -rf "$STAGE"
  if [[ $rc != 0 && -f $WORK/build.log ]]; then
    cp "$WORK/build.log" "$KERNELS/last-failed-build.log" 2>/dev/null &&
      say "build log kept in $KERNELS/last-failed-build.log"
  fi
  if [[ ${LOCALE2B_KERNEL_KEEP_BUILD:-0} == 1 ]]; then say "build tree kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

START=$SECONDS
say "building kernel $HASH from $PKG $VERSION in $WORK"
say "unpacking $SRC_TAR"
tar -xf "$SRC_TAR" -C "$WORK"
SRC=$WORK/$PKG
[[ -d $SRC ]] || die "unexpected tarball layout: no $PKG/ in $SRC_TAR"

cd "$SRC"
cp "$CONFIG" .config
say "merging $(basename "$FRAGMENT") and running make olddefconfig"
./scripts/kconfig/merge_config.sh -m .config "$FRAGMENT" >"$WORK/build.log" 2>&1 ||
  { tail -n 20 "$WORK/build.log" >&2; die "merge_config.sh failed"; }
make olddefconfig >>"$WORK/build.log" 2>&1 || { tail -n 20 "$WORK/build.log" >&2; die "make olddefconfig failed"; }

# Every fragment line must survive olddefconfig (a dependency may have dropped it).
lost=()
while IFS= read -r line; do
  if [[ $line =~ ^(CONFIG_[A-Za-z0-9_]+)=(.*)$ ]]; then
    grep -qxF "$line" .config || lost+=("$line")
  elif [[ $line =~ ^#\ (CONFIG_[A-Za-z0-9_]+)\ is\ not\ set$ ]]; then
    ! grep -q "^${BASH_REMATCH[1]}=" .config || lost+=("$line")
  fi
done <"$FRAGMENT"
((${#lost[@]} == 0)) || die "make olddefconfig dropped fragment options: ${lost[*]}"

JOBS=${LOCALE2B_KERNEL_JOBS:-$(nproc)}
export KBUILD_BUILD_USER=locale2b KBUILD_BUILD_HOST=locale2b
say "make -j$JOBS vmlinux (a few tens of minutes on 2 cores; log: $WORK/build.log)"
make -j"$JOBS" vmlinux >>"$WORK/build.log" 2>&1 &
MAKE_PID=$!
while kill -0 "$MAKE_PID" 2>/dev/null; do
  for _ in $(seq 60); do kill -0 "$MAKE_PID" 2>/dev/null || break; sleep 1; done
  kill -0 "$MAKE_PID" 2>/dev/null &&
    say "still compiling: $(grep -c '^  CC ' "$WORK/build.log" || true) files compiled, $((SECONDS - START)) s elapsed"
done
if ! wait "$MAKE_PID"; then
  grep -E 'error|Error' "$WORK/build.log" | tail -n 20 >&2 || true
  die "make vmlinux failed (see the log named below)"
fi
[[ -s vmlinux ]] || die "make finished but produced no vmlinux"

# --- install: stage beside the target, then rename into place ---
STAGE=$(mktemp -d "$KERNELS/.build-$HASH.XXXXXX")
cp vmlinux "$STAGE/vmlinux"
cp .config "$STAGE/config"
{
  echo "package=$PKG"
  echo "version=$VERSION"
  echo "kernelrelease=$(make -s kernelrelease 2>/dev/null)"
  echo "hash=$HASH"
  echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build_seconds=$((SECONDS - START))"
  echo "jobs=$JOBS"
} >"$STAGE/build-info"
chmod 0755 "$STAGE"
rm -rf "$KERNELS/$HASH"
mv -T "$STAGE" "$KERNELS/$HASH"
STAGE=
set_current
say "built in $((SECONDS - START)) s: $OUT ($(du -h "$OUT" | cut -f1))"
echo "$OUT"
