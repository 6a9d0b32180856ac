#!/usr/bin/env bash
# Pack a directory into a single-layer container image tar (the `docker save` layout) that
# `ctr -n k8s.io images import` and `docker load` accept. No Docker, no registry, no umoci:
# tar, sha256sum and printf only, and byte-for-byte reproducible (sorted entries, uid/gid 0, mtime 0).
#
#   pack-image.sh --rootfs DIR --ref NAME:TAG --out FILE.tar \
#                 [--entrypoint '["/bin/app"]'] [--cmd '["arg"]'] [--env '["K=V"]'] [--workdir /]
#
# --entrypoint, --cmd and --env take JSON arrays of strings, written into the image config as they are.
# The ref should carry a registry-looking host (e.g. locale2b.local/name:tag) so that containerd keeps it
# as written instead of prefixing docker.io/library/.
set -euo pipefail

ROOTFS= REF= OUT= ENTRYPOINT=null CMD=null ENVS='["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]' WORKDIR=/
while (($#)); do
  case $1 in
    --rootfs) ROOTFS=$2 ;;
    --ref) REF=$2 ;;
    --out) OUT=$2 ;;
    --entrypoint) ENTRYPOINT=$2 ;;
    --cmd) CMD=$2 ;;
    --env) ENVS=$2 ;;
    --workdir) WORKDIR=$2 ;;
    *) echo "pack-image: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -d $ROOTFS && -n $REF && -n $OUT ]] || { echo "pack-image: --rootfs DIR, --ref and --out are required" >&2; exit 2; }
for j in "$ENTRYPOINT" "$CMD" "$ENVS"; do
  [[ $j == null || $j == \[*\] ]] || { echo "pack-image: expected a JSON array, got: $j" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/pack-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$ROOTFS" -cf "$work/layer.tar" .
layer=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
mkdir "$work/$layer" && mv "$work/layer.tar" "$work/$layer/layer.tar"
printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Entrypoint":%s,"Cmd":%s,"Env":%s,"WorkingDir":"%s"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"scripts/k8s/pack-image.sh"}]}' \
  "$ENTRYPOINT" "$CMD" "$ENVS" "$WORKDIR" "$layer" >"$work/config.json"
config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
mv "$work/config.json" "$work/$config.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config" "$REF" "$layer" >"$work/manifest.json"
mkdir -p "$(dirname "$OUT")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf "$OUT.tmp" manifest.json "$config.json" "$layer"
mv "$OUT.tmp" "$OUT"
