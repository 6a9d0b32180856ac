#!/bin/sh
# Starts locale2b's Code Interpreter server in a code-interpreter-v1 sandbox:
# the server the Code Interpreter SDKs call on port 49999 (docs/code-interpreter.md).
# The template's start command runs this; extra arguments go to the server
# (python3 -m locale2b_ci --help).
#
# It runs as `user`, never as root: kernels run what the SDK sends, as the
# server's user. Started as root, it drops to `user` first.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
if [ "$(id -u)" = 0 ]; then
  exec runuser -u user -- env HOME=/home/user "$0" "$@"
fi
cd "$here"
exec python3 -m locale2b_ci --host 0.0.0.0 --port 49999 --cwd "${HOME:-/home/user}" "$@"
