#!/usr/bin/env bash
# Install what the test Kubernetes cluster (test/helpers/k8s/) needs from Debian, idempotently:
#   etcd-server                  etcd (the cluster's store)
#   containerd (+ runc)          one containerd per node
#   containernetworking-plugins  bridge, host-local and loopback CNI plugins (/usr/lib/cni)
#   openssl                      the cluster's CA, serving certs and service-account keys
#   iptables, conntrack          kube-proxy (iptables mode, inside each node's network namespace)
#   iproute2, util-linux         network namespaces, veths, nsenter
#   busybox-static               the test image's HTTP server (test/k8s)
#   buildah                      builds deploy/Dockerfile's image for the fleet test (scripts/k8s/build-image.sh)
# Go (>= 1.26, for scripts/k8s/build-binaries.sh) is not installed here: it comes from go.dev or the CI image.
# As root it installs what is missing with apt-get; as another user it prints the command. When everything is
# present it only checks (one dpkg-query). Exits non-zero when something is still missing.
set -uo pipefail
PACKAGES=(etcd-server containerd runc containernetworking-plugins openssl iptables conntrack iproute2 util-linux busybox-static buildah)
say() { printf 'k8s setup-host: %s\n' "$*" >&2; }

missing() {
  local installed p
  installed=" $(dpkg-query -W -f='${Package}=${Status}\n' "${PACKAGES[@]}" 2>/dev/null | awk -F= '$2 == "install ok installed" {printf "%s ", $1}')"
  for p in "${PACKAGES[@]}"; do [[ $installed == *" $p "* ]] || printf '%s\n' "$p"; done
}
command -v dpkg-query >/dev/null && command -v apt-get >/dev/null || {
  say "no apt-get/dpkg here: install by hand: ${PACKAGES[*]}"; exit 1; }
mapfile -t todo < <(missing)
if ((${#todo[@]})); then
  if [[ $(id -u) != 0 ]]; then say "run: sudo apt-get install -y --no-install-recommends ${todo[*]}"; exit 1; fi
  say "installing ${todo[*]}"
  # Debian's packages would start system-wide etcd/containerd services where an init system runs them;
  # the cluster runs its own copies, so stop those again if they were started.
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${todo[@]}" >&2; then
    say "apt-get install failed; refreshing the package lists and trying again"
    apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${todo[@]}" >&2
  fi
  if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
    systemctl disable --now etcd containerd >/dev/null 2>&1 || true
  fi
  mapfile -t todo < <(missing)
  ((${#todo[@]})) && { say "still missing: ${todo[*]}"; exit 1; }
fi
command -v go >/dev/null || [[ -x /usr/local/go/bin/go ]] || say "note: no Go toolchain found (scripts/k8s/build-binaries.sh needs Go >= 1.26)"
say "ok: ${PACKAGES[*]}"
