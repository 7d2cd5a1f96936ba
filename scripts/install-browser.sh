#!/usr/bin/env bash
# Installs the browser the console's test drives: Debian's chromium and chromedriver
# (packages chromium and chromium-driver; /usr/bin/chromium, /usr/bin/chromedriver), driven
# headless over W3C WebDriver by services/thumbnails/tests/thumbnails/console.rs. Nothing is
# fetched from a CDN: the packages come from the machine's Debian mirror.
#
# Already installed (or DOCFLOW_CHROMIUM / DOCFLOW_CHROMEDRIVER pointing at others): nothing
# to do. Installing needs root and apt (CI runs as root on Debian); elsewhere it says what to
# run and carries on — `make run` needs no browser; the console test fails with the same
# advice until one is there.
set -euo pipefail

chromium="${DOCFLOW_CHROMIUM:-/usr/bin/chromium}"
driver="${DOCFLOW_CHROMEDRIVER:-/usr/bin/chromedriver}"

if [ -x "$chromium" ] && [ -x "$driver" ]; then
    echo "browser: $("$chromium" --version 2>/dev/null | head -n1), $("$driver" --version | head -n1)"
    exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "the console test needs Debian's chromium and chromium-driver:" >&2
    echo "  sudo apt-get install -y --no-install-recommends chromium chromium-driver" >&2
    echo "(or set DOCFLOW_CHROMIUM and DOCFLOW_CHROMEDRIVER to a Chromium and its driver)" >&2
    echo "carrying on without it: the console's browser test will fail until it is installed" >&2
    exit 0
fi

CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
mkdir -p "$CACHE/logs"
log="$CACHE/logs/browser-install.log"
echo "==> installing Debian's chromium and chromium-driver (once; log: $log)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends chromium chromium-driver >"$log" 2>&1; then
    # A fresh machine may have no package lists yet.
    apt-get update >>"$log" 2>&1
    apt-get install -y --no-install-recommends chromium chromium-driver >>"$log" 2>&1 ||
        { tail -n 30 "$log" >&2; exit 1; }
fi
echo "browser: $("$chromium" --version 2>/dev/null | head -n1), $("$driver" --version | head -n1)"
