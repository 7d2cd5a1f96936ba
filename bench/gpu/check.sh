#!/usr/bin/env bash
# The GPU check (issue 11), in one go on a machine with an NVIDIA GPU and CUDA 13:
#   1. GPU vs CPU vectors on the committed reference texts (cosine >= 0.9999, else it fails);
#   2. the embedding benchmark on the GPU at batch token budgets 4k/16k/64k (chunks/s,
#      p50/p99 batch latency), and on the machine's CPU for scale;
#   3. sentence-transformers fp16 on the same GPU, same chunks (python3 with torch and
#      sentence-transformers, as the device image has them);
# and writes bench/results/gpu.md (or $OUT/gpu.md when $OUT is set, as the device tool does).
#
# Nothing is built or downloaded there: `make gpu-bundle` (here) puts the release
# `embed-bench` and the model as f16 safetensors (~45 MB) under .tools/gpu, which is carried.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE="${BUNDLE:-.tools/gpu}"
RESULTS="${OUT:-bench/results}"
mkdir -p "$RESULTS"
BIN="$BUNDLE/embed-bench"
MODEL="$BUNDLE/minilm-f16"
[ -x "$BIN" ] && [ -s "$MODEL/model.safetensors" ] || {
    echo "no bundle at $BUNDLE: run \`make gpu-bundle\` on the build machine and carry .tools/gpu" >&2
    exit 2
}

# cuBLAS and NVRTC: the CUDA toolkit's, or those of the image's Python wheels.
dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && dirs="$dirs:$d"
done
for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for lib in $(find "$sp/nvidia" -name 'libcublas.so*' -o -name 'libnvrtc.so*' 2>/dev/null); do
        dirs="$dirs:$(dirname "$lib")"
    done
done
export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

echo "==> 1. GPU vs CPU vectors"
"$BIN" check --model-dir "$MODEL" --device cuda:0 \
    --reference crates/docflow-embed/tests/data/minilm_reference.json | tee "$RESULTS/gpu-check.txt"

echo "==> 2. docflow-embed on the GPU, then on the CPU"
"$BIN" run --model-dir "$MODEL" --device cuda:0 --budgets 4096,16384,65536 --chunks 4096 \
    --texts-out "$RESULTS/gpu-chunks.json" --out "$RESULTS/gpu-docflow.md"
"$BIN" run --model-dir "$MODEL" --device cpu --budgets 16384 --chunks 256 \
    --out "$RESULTS/gpu-docflow-cpu.md"

echo "==> 3. sentence-transformers fp16 on the same GPU"
python3 bench/gpu/st_gpu_bench.py "$MODEL" "$RESULTS/gpu-chunks.json" "$RESULTS/gpu-st.md" || \
    echo "sentence-transformers comparison failed (see above)" > "$RESULTS/gpu-st.md"

{
    echo "# GPU: docflow-embed (cudarc) vs sentence-transformers fp16"
    echo
    echo "Command: \`bash bench/gpu/check.sh\` on the device machine (bundle from \`make gpu-bundle\`)  "
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown)  "
    echo "Date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "## GPU vs CPU vectors"
    echo
    echo '```'
    tail -n 1 "$RESULTS/gpu-check.txt"
    echo '```'
    echo
    sed -n '/^| budget/,$p' "$RESULTS/gpu-docflow.md" | sed '1i ## docflow-embed, GPU (f16 weights, f32 accumulation)\n'
    echo
    sed -n '/^| budget/,$p' "$RESULTS/gpu-docflow-cpu.md" | sed '1i ## docflow-embed, this machine'"'"'s CPU (candle, f32)\n'
    echo
    sed -n '/^##\|^|/,$p' "$RESULTS/gpu-st.md"
} > "$RESULTS/gpu.md"
cat "$RESULTS/gpu.md"
