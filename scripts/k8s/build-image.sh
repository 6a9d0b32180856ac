#!/usr/bin/env bash
# Build the locale2b image from deploy/Dockerfile with buildah (no Docker engine needed) and save it as an
# image tar that `ctr images import` and `docker load` take:
#
#   scripts/k8s/build-image.sh --ref locale2b.local/locale2b:test --out /tmp/locale2b.tar
#
# The Dockerfile starts FROM node:20-bookworm-slim (Docker Hub). Where Docker Hub cannot be reached (this
# project's machines reach Debian's and npm's registries only), a stand-in for it is built once from Debian's
# packages: `debootstrap --variant=minbase bookworm` plus this host's Node 20 (node and npm in /usr/local, as
# the official image has them), committed under that name in the build storage and labelled
# `dev.locale2b.stand-in=debootstrap`. Everything after FROM runs as written: apt-get from Debian, `npm ci`
# from npm, `npm run build`.
#
# Storage: its own buildah root, $LOCALE2B_CACHE_DIR/k8s-image (default ~/.cache/locale2b), outside the
# clone: the base, and the layers buildah caches (`--layers`: the apt-get and `npm ci` steps are redone only
# when the Dockerfile or package-lock.json change). When it grows past $LOCALE2B_IMAGE_CACHE_MB (default
# 6144) it is emptied first, and the next build is a cold one (about 1.5 min here). A lock (flock) runs one
# build at a time. RUN steps get this host's CA bundle as npm's cafile (a TLS-intercepting proxy in front of
# the npm registry), mounted for the build only: nothing of it is in the image.
#
# Prints the tar's path as the last line of stdout; progress on stderr. Needs root and buildah (Debian
# package `buildah`; scripts/k8s/setup-host.sh installs it). Options: --ref REF, --out TAR, --no-stand-in
# (fail rather than build the stand-in base), -h/--help.
set -euo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
CACHE=${LOCALE2B_CACHE_DIR:-$HOME/.cache/locale2b}/k8s-image
LIMIT_MB=${LOCALE2B_IMAGE_CACHE_MB:-6144}
BASE=docker.io/library/node:20-bookworm-slim
REF="" OUT="" STAND_IN=1

say() { printf 'build-image: %s\n' "$*" >&2; }
die() { printf 'build-image: error: %s\n' "$*" >&2; exit 1; }

while (($#)); do
  case $1 in
    --ref) REF=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-stand-in) STAND_IN=0; shift ;;
    -h|--help) sed -n '2,25p' "$(readlink -f "${BASH_SOURCE[0]}")" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (try --help)" ;;
  esac
done
[[ -n $REF && -n $OUT ]] || die "--ref and --out are needed (try --help)"
[[ $(id -u) == 0 ]] || die "buildah here runs as root (its storage, the RUN steps' mounts)"
command -v buildah >/dev/null || die "buildah is not installed (apt-get install buildah, or scripts/k8s/setup-host.sh)"

mkdir -p "$CACHE"
exec 9>"$CACHE.lock"
flock -n 9 || { say "another build is running; waiting for it"; flock 9; }

if [[ -d $CACHE/storage ]]; then
  used=$(du -sm "$CACHE/storage" 2>/dev/null | cut -f1)
  if ((used > LIMIT_MB)); then
    say "the build cache holds ${used} MB (more than ${LIMIT_MB}): emptying it"
    buildah --root "$CACHE/storage" --runroot "$CACHE/run" rmi --all --force >/dev/null 2>&1 || true
    rm -rf "$CACHE/storage" "$CACHE/run"
  fi
fi
B=(buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver overlay)

if ! "${B[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
  if timeout 60 "${B[@]}" pull -q "$BASE" >/dev/null 2>&1; then
    say "pulled $BASE"
  else
    ((STAND_IN)) || die "cannot pull $BASE, and --no-stand-in was given"
    node_version=$(node --version 2>/dev/null || true)
    [[ $node_version == v20.* ]] || die "cannot pull $BASE, and the stand-in needs this host's Node 20 (found '${node_version:-none}')"
    command -v debootstrap >/dev/null || die "cannot pull $BASE, and the stand-in needs debootstrap"
    say "cannot pull $BASE: building a stand-in from Debian bookworm (debootstrap) and this host's Node $node_version"
    root=$(mktemp -d "$CACHE/base.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase bookworm "$root" "${LOCALE2B_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    node_bin=$(readlink -f "$(command -v node)")
    npm_dir=$(readlink -f "$(dirname "$node_bin")/../lib/node_modules/npm")
    [[ -f $npm_dir/bin/npm-cli.js ]] || die "no npm beside $node_bin (looked in $npm_dir)"
    install -D -m 755 "$node_bin" "$root/usr/local/bin/node"
    mkdir -p "$root/usr/local/lib/node_modules"
    cp -a "$npm_dir" "$root/usr/local/lib/node_modules/npm"
    ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
    ln -s ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
    c=$("${B[@]}" from scratch)
    m=$("${B[@]}" mount "$c")
    cp -a "$root/." "$m/"
    "${B[@]}" umount "$c" >/dev/null
    "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env "NODE_VERSION=${node_version#v}" \
      --label dev.locale2b.stand-in=debootstrap --cmd node "$c"
    "${B[@]}" commit -q --rm "$c" "$BASE" >/dev/null
    rm -rf "$root"
    trap - EXIT
  fi
fi

# npm in the RUN steps trusts what this host trusts (mounted for the build, not copied into the image).
npmrc=$(mktemp)
trap 'rm -f "$npmrc"' EXIT
mounts=()
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  echo "cafile=/run/locale2b-host-ca.crt" >"$npmrc"
  mounts=(-v /etc/ssl/certs/ca-certificates.crt:/run/locale2b-host-ca.crt:ro -v "$npmrc:/usr/local/etc/npmrc:ro")
fi
say "building $REF from deploy/Dockerfile"
start=$(date +%s)
"${B[@]}" build --layers --pull=never --network host "${mounts[@]}" -f "$REPO/deploy/Dockerfile" -t "$REF" "$REPO" >"$CACHE/build.log" 2>&1 \
  || { tail -n 30 "$CACHE/build.log" >&2; die "the build failed (log: $CACHE/build.log)"; }
rm -f "$OUT"
"${B[@]}" push -q "$REF" "docker-archive:$OUT:$REF" >/dev/null
say "built $REF in $(($(date +%s) - start)) s: $(du -m "$OUT" | cut -f1) MB"
echo "$OUT"
