// The shell scripts a build runs inside its sandbox, as root, for the steps
// that are not a user's command: COPY/ADD, WORKDIR, USER, and the export of
// the finished root. They run in the sandbox, so whatever the files or the
// image hold (absolute paths, `..`, symlinks in a tar) reaches only the
// sandbox's own filesystem. POSIX sh, so they run on Debian, Alpine (busybox)
// and friends alike. Arguments come as positional parameters, never spliced
// into the script.

/** COPY: $1 the uploaded tar, $2 source (may be a glob), $3 destination, $4 owner (user[:group]), $5 mode, $6 the current WORKDIR. */
export const COPY_SCRIPT = `
set -eu
archive="$1"; src="$2"; dest="$3"; owner="$4"; mode="$5"; cwd="$6"
work="$(mktemp -d /tmp/.l2b-copy.XXXXXX)"
trap 'rm -rf "$work" "$archive"' EXIT
tar -xf "$archive" -C "$work" 2>"$work.err" || { cat "$work.err" >&2; rm -f "$work.err"; echo "cannot unpack the files of $src" >&2; exit 2; }
rm -f "$work.err"
case "$dest" in /*) ;; *) dest="$cwd/$dest" ;; esac
fix() {
  if [ -n "$owner" ]; then chown -R -h "$owner" "$1"; fi
  if [ -n "$mode" ]; then
    if [ -d "$1" ] && [ ! -L "$1" ]; then find "$1" -type f -exec chmod "$mode" {} +; elif [ ! -L "$1" ]; then chmod "$mode" "$1"; fi
  fi
}
cd "$work"
IFS='
'
count=0; single=""
for m in $src; do
  if [ -e "$m" ] || [ -L "$m" ]; then count=$((count + 1)); single="$m"; fi
done
if [ "$count" -eq 0 ]; then echo "no files match '$src' in the uploaded files" >&2; exit 3; fi
todir=0
case "$dest" in */) todir=1 ;; esac
if [ "$count" -gt 1 ] || { [ -d "$single" ] && [ ! -L "$single" ]; } || { [ -d "$dest" ] && [ ! -L "$dest" ]; }; then todir=1; fi
if [ "$todir" -eq 0 ]; then
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  cp -a "$single" "$dest"
  fix "$dest"
  exit 0
fi
created=0
[ -d "$dest" ] || { mkdir -p "$dest"; created=1; }
for m in $src; do
  if [ -d "$m" ] && [ ! -L "$m" ]; then
    for c in "$m"/* "$m"/.[!.]* "$m"/..?*; do
      if [ -e "$c" ] || [ -L "$c" ]; then
        name="$(basename "$c")"; rm -rf "$dest/$name"; cp -a "$c" "$dest/$name"; fix "$dest/$name"
      fi
    done
  elif [ -e "$m" ] || [ -L "$m" ]; then
    name="$(basename "$m")"; rm -rf "$dest/$name"; cp -a "$m" "$dest/$name"; fix "$dest/$name"
  fi
done
if [ "$created" -eq 1 ] && [ -n "$owner" ]; then chown -h "$owner" "$dest"; fi
`;

/** ADD of a URL: $1 the URL, $2 destination, $3 owner, $4 mode, $5 the current WORKDIR. */
export const ADD_URL_SCRIPT = `
set -eu
url="$1"; dest="$2"; owner="$3"; mode="$4"; cwd="$5"
case "$dest" in /*) ;; *) dest="$cwd/$dest" ;; esac
case "$dest" in */) mkdir -p "$dest"; dest="$dest$(basename "\${url%%\\?*}")" ;; esac
mkdir -p "$(dirname "$dest")"
if command -v curl >/dev/null 2>&1; then curl -fsSL -o "$dest" "$url"
elif command -v wget >/dev/null 2>&1; then wget -q -O "$dest" "$url"
else echo "ADD of a URL needs curl or wget in the image" >&2; exit 4; fi
if [ -n "$owner" ]; then chown "$owner" "$dest"; fi
chmod "\${mode:-0600}" "$dest"
`;

/** WORKDIR: $1 the directory, $2 its owner when it is made now. */
export const WORKDIR_SCRIPT = `
set -eu
if [ ! -d "$1" ]; then mkdir -p "$1"; if [ -n "$2" ]; then chown "$2" "$1"; fi; fi
`;

/** USER: $1 the name, $2 "true" for passwordless sudo. Made when missing (useradd, adduser, or /etc/passwd itself). */
export const USER_SCRIPT = `
set -eu
name="$1"; sudo="$2"
if ! id -u "$name" >/dev/null 2>&1; then
  if command -v useradd >/dev/null 2>&1; then useradd -m -s /bin/sh "$name"
  elif command -v adduser >/dev/null 2>&1; then adduser -D -s /bin/sh "$name"
  else
    uid=1001; while grep -q "^[^:]*:[^:]*:$uid:" /etc/passwd; do uid=$((uid + 1)); done
    echo "$name:x:$uid:$uid::/home/$name:/bin/sh" >> /etc/passwd
    grep -q "^$name:" /etc/group 2>/dev/null || echo "$name:x:$uid:" >> /etc/group
    mkdir -p "/home/$name"; chown "$uid:$uid" "/home/$name"
  fi
  if [ -x /bin/bash ] && command -v usermod >/dev/null 2>&1; then usermod -s /bin/bash "$name" || true; fi
fi
if [ "$sudo" = "true" ]; then
  mkdir -p /etc/sudoers.d
  echo "$name ALL=(ALL:ALL) NOPASSWD: ALL" > "/etc/sudoers.d/$name"
  chmod 0440 "/etc/sudoers.d/$name"
fi
`;

/**
 * The sandbox's root as a tar on stdout, what a runtime mounts over it left
 * out (/proc, /sys, /dev, /run and the files the runtime provides). GNU tar's
 * exit 1 is a warning, not a failure: a file changed or went while it was
 * read (a process a step left running; a read-only layer whose inode's
 * change time moved when another build hard-linked it): the archive has each
 * file as it was read, and the warnings go to the build log.
 */
export const EXPORT_SCRIPT = `
set -euf
cd /
ex="--exclude=./proc --exclude=./sys --exclude=./dev --exclude=./run --exclude=./etc/resolv.conf --exclude=./tmp/.l2b-*"
if tar --version 2>/dev/null | grep -q GNU; then
  rc=0
  tar --numeric-owner --xattrs --xattrs-include='*' -cpf - $ex . || rc=$?
  [ "$rc" -eq 1 ] && exit 0
  exit "$rc"
fi
exec tar -cf - $ex .
`;
