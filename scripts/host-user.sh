#!/usr/bin/env bash
# Runs a command as if this host had (or had not) an ordinary account named
# `user`, as many VM and container images have, without touching the host's
# accounts:
#
#   bash scripts/host-user.sh with npx vitest run test/envd/process.test.ts
#   bash scripts/host-user.sh without npx vitest run test/envd/process.test.ts
#
# The command runs in a private mount namespace where /etc/passwd, group,
# shadow and gshadow are copies with `user` added (`with`: the first free uid
# and gid from 1001 up, and a 0700 /home/user through an overlay over the
# host's /home, whose writes are dropped at the end; where something is
# mounted below /home there is no /home/user, and it says so) or removed
# (`without`). Nothing is mounted or written outside the namespace but a
# temporary directory, removed on exit. scripts/test.mjs uses it for its
# host-user pass (LOCALE2B_TEST_HOST_USER=1): envd run as root acts as `user`
# when that account exists, and the tests that run envd on the host must pass
# either way.
#
# Needs root and util-linux unshare; exits 3, saying why, without them, and 4
# when there is nothing to change (`with` on a host that has `user`, `without`
# on one that has not).
set -euo pipefail

mode="${1:-}"
if [ "$mode" != with ] && [ "$mode" != without ] || [ "$#" -lt 2 ]; then
  echo "usage: $0 with|without COMMAND [ARG...]" >&2
  exit 2
fi
shift
if [ "$(id -u)" -ne 0 ]; then
  echo "host-user: needs root (a private mount namespace with bind mounts over /etc/passwd)" >&2
  exit 3
fi
if ! command -v unshare >/dev/null; then
  echo "host-user: util-linux unshare is missing" >&2
  exit 3
fi
has_user=false
if grep -q '^user:' /etc/passwd; then has_user=true; fi
if [ "$mode" = with ] && $has_user; then
  echo "host-user: this host already has an account named 'user'" >&2
  exit 4
fi
if [ "$mode" = without ] && ! $has_user; then
  echo "host-user: this host has no account named 'user'" >&2
  exit 4
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/locale2b-host-user-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
for f in passwd group shadow gshadow; do
  if [ -e "/etc/$f" ]; then
    if [ "$mode" = with ]; then cp -p "/etc/$f" "$tmp/$f"; else grep -v '^user:' "/etc/$f" >"$tmp/$f" || true; fi
  fi
done
if [ "$mode" = with ]; then
  # The first id from 1001 up that neither passwd nor group uses.
  id=1001
  while cut -d: -f3 /etc/passwd /etc/group | grep -qx "$id"; do id=$((id + 1)); done
  echo "user:x:$id:$id::/home/user:/bin/bash" >>"$tmp/passwd"
  echo "user:x:$id:" >>"$tmp/group"
  if [ -e "$tmp/shadow" ]; then echo "user:*:20000:0:99999:7:::" >>"$tmp/shadow"; fi
  if [ -e "$tmp/gshadow" ]; then echo "user:!::" >>"$tmp/gshadow"; fi
  # The upper layer of /home: user's home.
  mkdir "$tmp/home" "$tmp/home-work"
  install -d -o "$id" -g "$id" -m 0700 "$tmp/home/user"
fi

# The namespace's mounts go with its last process; $tmp is removed by this shell's trap.
set +e
unshare --mount --propagation private -- bash -euc '
  mode=$1 tmp=$2
  shift 2
  for f in passwd group shadow gshadow; do
    if [ -e "$tmp/$f" ]; then mount --bind "$tmp/$f" "/etc/$f"; fi
  done
  if [ "$mode" = without ]; then
    echo "host-user: /etc/passwd has no user, in this mount namespace only" >&2
  else
    home="home /home/user"
    if awk '"'"'$5 ~ "^/home/" { found = 1 } END { exit !found }'"'"' /proc/self/mountinfo; then
      home="no /home/user (something is mounted below /home: an overlay would hide it)"
    elif ! mount -t overlay overlay -o "lowerdir=/home,upperdir=$tmp/home,workdir=$tmp/home-work" /home; then
      home="no /home/user (no overlay mount)"
    fi
    echo "host-user: /etc/passwd has user (uid $(id -u user)), $home; in this mount namespace only" >&2
  fi
  exec "$@"
' host-user "$mode" "$tmp" "$@"
status=$?
exit "$status"
