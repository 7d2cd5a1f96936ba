#!/usr/bin/env bash
# `make image-bench`: the image's size (by part), its build time (a first `make image` on
# the release target as it stands, then a second with nothing changed) and each service's
# cold start from it (process start to /readyz, models baked in: the image test's own
# figures), written to bench/results/image.md. Root only, like make image-test.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
OUT="${DOCFLOW_IMAGE_OUT:-$ROOT/dist}"
REPORT="${1:-$ROOT/bench/results/image.md}"
VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml")"

t0=$(date +%s.%N)
"$ROOT/scripts/build-image.sh" >/dev/null
t1=$(date +%s.%N)
digest0="$(cat "$OUT/docflow-$VERSION.digest")"
"$ROOT/scripts/build-image.sh" >/dev/null
t2=$(date +%s.%N)
digest1="$(cat "$OUT/docflow-$VERSION.digest")"
COLD="$(mktemp)"
DOCFLOW_IMAGE_COLD_STARTS="$COLD" "$ROOT/scripts/image-test.sh" >/dev/null
digest2="$(cat "$OUT/docflow-$VERSION.digest")"

FS="$CACHE/image/rootfs"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
size() { du -sbc "$@" 2>/dev/null | tail -1 | cut -f1; }
total=$(size "$FS")
bins=$(size "$FS"/usr/local/bin/*)
ort=$(size "$FS/opt/docflow/lib/libonnxruntime.so")
pdfium=$(size "$FS/opt/docflow/lib/libpdfium.so")
ocr=$(size "$FS/opt/docflow/models/ocr")
minilm=$(size "$FS/opt/docflow/models/minilm")
syslibs=$(size "$FS/usr/lib/x86_64-linux-gnu")
rest=$((total - bins - ort - pdfium - ocr - minilm - syslibs))
layer=$(find "$CACHE/image/oci/blobs" -type f -size +1M -printf '%s\n' | sort -n | tail -1)
docker=$(stat -c %s "$OUT/docflow-$VERSION.docker.tar")

{
    echo "# The OCI image: size, build time, cold starts"
    echo
    echo "Command: \`sudo make image-bench\` (scripts/image-bench.sh), $(date -u +%Y-%m-%d), $(nproc) cores, $(git -C "$ROOT" rev-parse --short HEAD)."
    echo
    echo "## Size"
    echo
    echo "| part | size |"
    echo "|---|---|"
    echo "| every docflow binary ($(ls "$FS/usr/local/bin" | wc -l) programs, release, debug info stripped) | $(mib "$bins") |"
    for b in "$FS"/usr/local/bin/*; do echo "| · $(basename "$b") | $(mib "$(size "$b")") |"; done
    echo "| libonnxruntime 1.32.0 (CPU) | $(mib "$ort") |"
    echo "| libpdfium (pypdfium2 wheel) | $(mib "$pdfium") |"
    echo "| PP-OCRv6 detection + recognition + line orientation models | $(mib "$ocr") |"
    echo "| all-MiniLM-L6-v2 | $(mib "$minilm") |"
    echo "| system libraries ($(ls "$FS/usr/lib/x86_64-linux-gnu" | wc -l) files from $(ls "$FS/usr/share/doc" | grep -vc '^docflow-') Debian packages) | $(mib "$syslibs") |"
    echo "| the rest (CA bundle, copyright files, SBOM, /etc) | $(mib "$rest") |"
    echo "| **uncompressed (the root filesystem)** | **$(mib "$total")** (goal ≤ 400 MB: $(awk -v b="$total" 'BEGIN { print (b <= 400e6) ? "met" : "not met" }')) |"
    echo "| the layer, gzip (what a registry stores and a node pulls) | $(mib "$layer") |"
    echo "| docker-archive (uncompressed layer) | $(mib "$docker") |"
    echo
    echo "## Build time"
    echo
    echo "| build | time |"
    echo "|---|---|"
    echo "| the first \`make image\` of the run (recompiles what changed since the last release build) | $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s", b - a }') |"
    echo "| a second \`make image\`, nothing changed (goal < 2 min) | $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f s", b - a }') |"
    echo
    echo "The same sources give the same image: three builds (the two above and make image-test's) $(if [ "$digest0" = "$digest1" ] && [ "$digest1" = "$digest2" ]; then echo "have one manifest digest, \`$digest1\`"; else echo "differ: $digest0, $digest1, $digest2"; fi)."
    echo
    echo "## Cold start from the image"
    echo
    echo "Each service started from the unpacked image as its config says (user 10001, its environment, a read-only root, the volume at /var/lib/docflow), the broker and the database outside it, until its /readyz answers (\`tools/testbed/tests/chaos/image.rs\`); a node's image pull and a pod's scheduling come on top."
    echo
    echo "| service | process start → ready |"
    echo "|---|---|"
    while read -r name secs; do echo "| $name | $secs s |"; done <"$COLD"
} >"$REPORT"
rm -f "$COLD"
echo "wrote $REPORT"
