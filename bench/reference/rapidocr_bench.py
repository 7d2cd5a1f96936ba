"""RapidOCR (Python, angle classifier off, the wheel's PP-OCRv6 small det + rec — the models
docflow runs) on the pages `ocr-embed-bench --pages-out DIR` wrote, on the same machine:
time per page and character error rate against DIR/truth.txt. Writes a markdown table.

    python -m venv /tmp/stv && /tmp/stv/bin/pip install rapidocr==3.10.0 onnxruntime==1.32.0
    /tmp/stv/bin/python bench/reference/rapidocr_bench.py DIR bench/results/ocr-reference.md [RUNS]
"""

import datetime
import os
import sys
import time

import onnxruntime
import rapidocr
from rapidocr import RapidOCR


def distance(a, b):
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diag, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            up = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1]))
            diag = up
    return row[len(b)]


def pct(values, p):
    values = sorted(values)
    return values[round(p / 100 * (len(values) - 1))]


def main(pages, out, runs):
    engine = RapidOCR(params={"Global.use_cls": False, "Global.log_level": "warning"})
    truth = " ".join(open(os.path.join(pages, "truth.txt")).read().split())
    rows = []
    for name in sorted(os.listdir(pages)):
        if not name.endswith((".png", ".jpg")):
            continue
        path = os.path.join(pages, name)
        engine(path)  # warm-up
        times, text = [], ""
        for _ in range(runs):
            t = time.perf_counter()
            result = engine(path, use_cls=False)
            times.append((time.perf_counter() - t) * 1000)
            text = " ".join(" ".join(result.txts or ()).split())
        cer = distance(text, truth) / len(truth)
        rows.append((name, pct(times, 50), pct(times, 99), cer))
        print(rows[-1], flush=True)
    with open(out, "w") as f:
        f.write("# OCR reference: RapidOCR (Python) on the benchmark pages\n\n")
        f.write(f"Command: `python bench/reference/rapidocr_bench.py {pages} {out} {runs}` on the pages of "
                "`ocr-embed-bench --pages-out`  \n")
        f.write(f"Machine: {os.cpu_count()} cores; rapidocr {rapidocr.__version__ if hasattr(rapidocr, '__version__') else '3.10.0'}, "
                f"onnxruntime {onnxruntime.__version__}, angle classifier off, PP-OCRv6 small det + rec (the wheel's).  \n")
        f.write(f"Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}\n\n")
        f.write("| page | p50 | p99 | pages/s at p50 | CER |\n|---|---|---|---|---|\n")
        for name, p50, p99, cer in rows:
            f.write(f"| {name} | {p50:.0f} ms | {p99:.0f} ms | {1000 / p50:.2f} | {cer * 100:.2f} % |\n")
    print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)
