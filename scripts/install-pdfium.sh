#!/usr/bin/env bash
# Installs libpdfium (PDF rasteriser used by the thumbnails stage) once into a cache outside
# the clone and links it as .tools/lib/libpdfium.so. The library comes from the PyPI wheel of
# pypdfium2 (a prebuilt pdfium for manylinux x86_64), fetched with pip; nothing is compiled.
set -euo pipefail

PYPDFIUM2_VERSION="${PYPDFIUM2_VERSION:-5.15.2}"
# The wheel's SHA-256 (5.15.2, manylinux_2_17_x86_64); another version needs its own.
PINNED_SHA256=dc31aea5b0fb9fefc9b537a65f4113980b2c40798445736a7e6565bc85161e37
if [ "$PYPDFIUM2_VERSION" = 5.15.2 ]; then
    PYPDFIUM2_SHA256="${PYPDFIUM2_SHA256:-$PINNED_SHA256}"
fi
CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$CACHE/pdfium-$PYPDFIUM2_VERSION"
LINK="$ROOT/.tools/lib/libpdfium.so"

mkdir -p "$ROOT/.tools/lib"
if [ ! -s "$DEST/lib/libpdfium.so" ]; then
    echo "==> fetching libpdfium from the pypdfium2 $PYPDFIUM2_VERSION wheel into $DEST"
    PYTHON="$(command -v python3 || command -v python)"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$PYTHON" -m pip download --quiet --disable-pip-version-check "pypdfium2==$PYPDFIUM2_VERSION" \
        --only-binary :all: --no-deps --platform manylinux_2_17_x86_64 --python-version 3.11 \
        -d "$tmp"
    wheel="$(ls "$tmp"/pypdfium2-*.whl)"
    [ -n "${PYPDFIUM2_SHA256:-}" ] || {
        echo "PYPDFIUM2_VERSION=$PYPDFIUM2_VERSION: set PYPDFIUM2_SHA256 to its wheel's SHA-256" >&2
        exit 1
    }
    echo "$PYPDFIUM2_SHA256  $wheel" | sha256sum --check --quiet || {
        echo "pypdfium2 $PYPDFIUM2_VERSION: the wheel's SHA-256 is not the pinned one" >&2
        exit 1
    }
    "$PYTHON" - "$wheel" "$tmp/lib" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("pypdfium2_raw/libpdfium.so", sys.argv[2])
PY
    mkdir -p "$DEST/lib"
    mv "$tmp/lib/pypdfium2_raw/libpdfium.so" "$DEST/lib/libpdfium.so.partial"
    mv "$DEST/lib/libpdfium.so.partial" "$DEST/lib/libpdfium.so"
fi
ln -sfn "$DEST/lib/libpdfium.so" "$LINK"
echo "pdfium: pypdfium2 $PYPDFIUM2_VERSION at $LINK -> $DEST/lib/libpdfium.so"
