#!/usr/bin/env bash
# Real PDFs for the OCR benchmark's "real pages" table (`make bench`): the test resources of
# the pypdf 7.1.1 sdist from PyPI (SHA-256 pinned) — a public-domain scan (the Siege of
# Vicksburg sample), a form, a multi-column layout, born-digital reports — unpacked once into
# the cache and linked as .tools/bench-pdfs.
set -euo pipefail
CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="$(command -v python3 || command -v python)"
DEST="$CACHE/pypdf-7.1.1-resources"
SHA=2eff4e2fc5fb22a6d6711e6f1166cdc9ab5765d90cd0d77dfea3f4aa91a27b1d
if [ ! -s "$DEST/crazyones.pdf" ]; then
    echo "==> fetching the pypdf 7.1.1 sdist's resources into $DEST"
    tmp="$(mktemp -d)"
    "$PYTHON" -m pip download --quiet --disable-pip-version-check "pypdf==7.1.1" --no-deps \
        --no-binary :all: -d "$tmp"
    echo "$SHA  $tmp/pypdf-7.1.1.tar.gz" | sha256sum --check --quiet
    mkdir -p "$DEST"
    tar -xzf "$tmp/pypdf-7.1.1.tar.gz" -C "$tmp"
    cp "$tmp"/pypdf-7.1.1/resources/*.pdf "$DEST"/
    rm -rf "$tmp"
fi
mkdir -p "$ROOT/.tools"
ln -sfn "$DEST" "$ROOT/.tools/bench-pdfs"
echo "bench PDFs: $(ls "$DEST" | wc -l) files at .tools/bench-pdfs"
