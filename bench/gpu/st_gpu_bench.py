"""sentence-transformers fp16 on the GPU, on the chunks `embed-bench run --texts-out` wrote:
chunks/s and p50/p99 batch latency at batch sizes matching the token budgets of docflow's run
(the chunks are ~254-token windows, so a budget of B padded tokens holds B // 256 of them).

    python3 bench/gpu/st_gpu_bench.py MODEL_DIR CHUNKS_JSON OUT_MD
"""

import json
import statistics
import sys
import time

import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer, models


def pct(values, p):
    values = sorted(values)
    return values[round(p / 100 * (len(values) - 1))]


def main(model_dir, chunks_path, out):
    texts = json.load(open(chunks_path))
    word = models.Transformer(model_dir, max_seq_length=256)
    pool = models.Pooling(word.get_word_embedding_dimension(), "mean")
    model = SentenceTransformer(modules=[word, pool, models.Normalize()], device="cuda")
    model.half()
    model.encode(texts[:64], batch_size=64)
    rows = []
    for budget in (4096, 16384, 65536):
        batch = max(1, budget // 256)
        latencies = []
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(0, len(texts), batch):
            t = time.perf_counter()
            model.encode(texts[i : i + batch], batch_size=batch, convert_to_numpy=True)
            torch.cuda.synchronize()
            latencies.append((time.perf_counter() - t) * 1000)
        seconds = time.perf_counter() - start
        rows.append((budget, batch, len(texts) / seconds, pct(latencies, 50), pct(latencies, 99)))
        print(rows[-1], flush=True)
    with open(out, "w") as f:
        f.write(
            f"## sentence-transformers {sentence_transformers.__version__} fp16, torch {torch.__version__}, "
            f"{torch.cuda.get_device_name(0)}; {len(texts)} chunks, tokenizing included\n\n"
        )
        f.write("| budget (padded tokens) | chunks per batch | chunks/s | batch p50 | batch p99 |\n|---|---|---|---|---|\n")
        for budget, batch, per_s, p50, p99 in rows:
            f.write(f"| {budget} | {batch} | {per_s:.0f} | {p50:.1f} ms | {p99:.1f} ms |\n")
    print("wrote", out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
