#!/usr/bin/env bash
# Creates the Python venv the Code Interpreter server's host tests run it in
# (the server, its kernels and the data stack of rootfs/code-interpreter/
# requirements.txt), idempotently.
#
#   bash scripts/setup-code-interpreter-venv.sh     # prints the venv path on its last line
#
# Where: $LOCALE2B_CI_VENV, else ~/.cache/locale2b/ci-venv-<key>, where <key> is
# the first 16 hex digits of sha256(rootfs/code-interpreter/requirements.txt);
# test/code-interpreter/server.ts and test/python/test_code_interpreter.py
# compute the same path. A venv that finished installing carries a marker file;
# with it present this script returns at once. A changed requirements.txt gives
# a new key, so a new venv.
#
# Needs python3 >= 3.11 (with the venv module) and PyPI (~40 s, ~450 MB). On
# failure it exits non-zero and leaves no half-built venv: the tests then skip
# and say why.
set -euo pipefail
cd "$(dirname "$0")/.."

req="rootfs/code-interpreter/requirements.txt"
python="${PYTHON:-python3}"

if [[ -n "${LOCALE2B_CI_VENV:-}" ]]; then
  venv="$LOCALE2B_CI_VENV"
else
  venv="$HOME/.cache/locale2b/ci-venv-$(sha256sum "$req" | cut -c1-16)"
fi
marker="$venv/.locale2b-requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"

if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$venv/bin/python" ]]; then
  echo "setup-code-interpreter-venv: venv is ready (cached): $venv"
  echo "$venv"
  exit 0
fi

if ! command -v "$python" >/dev/null 2>&1; then
  echo "setup-code-interpreter-venv: $python not found: the Code Interpreter tests will be skipped" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "setup-code-interpreter-venv: $("$python" --version 2>&1) is too old (the server and its pins need Python >= 3.11)" >&2
  exit 1
fi

# One build at a time (vitest and pytest may both ask): the second waits for
# the first, then finds the marker. A failed build is removed.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$venv/bin/python" ]]; then
  echo "setup-code-interpreter-venv: venv is ready (built meanwhile): $venv" >&2
  echo "$venv"
  exit 0
fi
ok=0
cleanup() {
  [[ $ok == 1 ]] || rm -rf "$venv"
}
trap cleanup EXIT
rm -rf "$venv"
echo "setup-code-interpreter-venv: creating $venv with $("$python" --version 2>&1)" >&2
"$python" -m venv "$venv"
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --timeout 30 --retries 2 -r "$req" >&2; then
  echo "setup-code-interpreter-venv: pip install -r $req failed (is PyPI reachable?)" >&2
  exit 1
fi
echo "$want" >"$marker"
ok=1
echo "setup-code-interpreter-venv: installed $req into $venv" >&2
echo "$venv"
