#!/usr/bin/env bash
# Debian's Chromium for the dashboard's browser tests (test/control-plane/dashboard-browser.test.ts drives it
# with playwright-core: no browser download). Idempotent: does nothing when `chromium` is on PATH. As root
# with apt-get it installs `chromium` and a font; otherwise it says what to install and exits 1 (the
# browser tests then skip and say why).
set -euo pipefail

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  echo "setup-browser: $(command -v chromium || command -v chromium-browser) is there"
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-browser: no chromium; install it (Debian/Ubuntu: apt-get install chromium), or set LOCALE2B_CHROMIUM to a Chromium binary" >&2
  exit 1
fi
packages=(chromium fonts-dejavu-core)
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"; then
  echo "setup-browser: apt-get install failed; refreshing the package lists and trying again"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
fi
echo "setup-browser: $(command -v chromium) installed"
