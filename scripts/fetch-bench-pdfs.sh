#!/usr/bin/env bash
# Real PDFs for the OCR benchmarks (`make bench`), from PyPI sdists (SHA-256 pinned), unpacked
# once into the cache:
#   - .tools/bench-pdfs: the test resources of pypdf 7.1.1 — a public-domain scan (the Siege
#     of Vicksburg sample), a form, a multi-column layout, born-digital reports;
#   - .tools/bench-dense: dense pages — the 2007 IRS Instructions and Form 1040-NR (US
#     government works; three columns, tables, boxes, small print), a two-column paper and
#     the US Copyright Office's DMCA summary from pdfminer 20191125's samples, and two US
#     government forms (DD 293, VA 21-0966) and a real 300 dpi brochure scan with its OCR
#     layer from pikepdf 10.18.0's test resources.
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

# sdist NAME VERSION SHA256 DEST PATH...: the files at PATHs inside the sdist into DEST.
sdist() {
    local name="$1" version="$2" sha="$3" dest="$4"
    shift 4
    local missing=0 f
    for f in "$@"; do [ -s "$dest/$(basename "$f")" ] || missing=1; done
    [ "$missing" = 0 ] && return 0
    echo "==> fetching $name $version's sample PDFs into $dest"
    local tmp
    tmp="$(mktemp -d)"
    # The sdist file itself (pip would build the package's metadata, and its build tools).
    "$PYTHON" - "$name" "$version" "$tmp" <<'PY'
import os, re, sys, urllib.request
name, version, dest = sys.argv[1:4]
# The package's page of the simple index, as pip reads it.
with urllib.request.urlopen(f"https://pypi.org/simple/{name}/", timeout=120) as r:
    page = r.read().decode()
wanted = f"{name.replace('-', '_')}-{version}.tar.gz".lower()
url = next(
    u for u in re.findall(r'href="([^"]+)"', page)
    if u.split("#")[0].rsplit("/", 1)[-1].lower().replace("-", "_").replace("_" + version, "-" + version) == wanted
)
path = os.path.join(dest, url.split("#")[0].rsplit("/", 1)[-1])
with urllib.request.urlopen(url.split("#")[0], timeout=600) as r, open(path, "wb") as out:
    out.write(r.read())
PY
    local archive
    archive="$(ls "$tmp"/*.tar.gz)"
    echo "$sha  $archive" | sha256sum --check --quiet
    mkdir -p "$dest"
    for f in "$@"; do
        tar -xzf "$archive" -C "$tmp" "$f"
        cp "$tmp/$f" "$dest/"
    done
    rm -rf "$tmp"
}

DENSE="$CACHE/dense-pdfs-1"
sdist pdfminer 20191125 9e700bc731300ed5c8936343c1dd4529638184198e54e91dd2b59b64a755dc01 "$DENSE" \
    pdfminer-20191125/samples/nonfree/i1040nr.pdf pdfminer-20191125/samples/nonfree/f1040nr.pdf \
    pdfminer-20191125/samples/nonfree/naacl06-shinyama.pdf pdfminer-20191125/samples/nonfree/dmca.pdf
sdist pikepdf 10.18.0 cb555ebff93482e8a6eb55881488b469bbb2b5675161c1b93a0510a8642d98d0 "$DENSE" \
    pikepdf-10.18.0/tests/resources/form_dd0293.pdf pikepdf-10.18.0/tests/resources/form_210966.pdf \
    pikepdf-10.18.0/tests/resources/sandwich.pdf
ln -sfn "$DENSE" "$ROOT/.tools/bench-dense"
echo "dense bench PDFs: $(ls "$DENSE" | wc -l) files at .tools/bench-dense"
