#!/usr/bin/env bash
# A real browser for the dashboard's tests (tests/dashboard/test_browser.py): Debian's
# headless Chromium and its WebDriver. Installs them when missing (idempotent); the
# tests drive them through the `selenium` package of the test extra.
#
#   bash tests/harness/browser.sh        # install chromium + chromium-driver if missing
set -euo pipefail

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    echo "browser: chromium and chromedriver are installed" >&2
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y --no-install-recommends chromium chromium-driver >&2 \
    || { $SUDO apt-get update >&2 && $SUDO apt-get install -y --no-install-recommends chromium chromium-driver >&2; }
command -v chromium >/dev/null && command -v chromedriver >/dev/null
echo "browser: installed $(chromium --version 2>/dev/null)" >&2
