"""RapidOCR (Python, angle classifier off, the wheel's PP-OCRv6 small det + rec — the models
docflow runs, onnxruntime's default threads) on page images given as arguments: one JSON line
per page, in order, with its wall time, its CPU time (the process's user + system time, every
thread) and its text (lines in RapidOCR's order, joined by newlines). `ocr-pages-bench
--rapidocr-python PY` runs it on the same pages docflow read, in the same run.

    python -m venv VENV && VENV/bin/pip install rapidocr==3.10.0 onnxruntime==1.32.0
    VENV/bin/python bench/reference/rapidocr_pages.py [--threads=N] PAGE.png...

--threads=N: onnxruntime's intra-op threads (default: onnxruntime's own, one a core).
"""

import json
import sys
import time

from rapidocr import RapidOCR


def main(args):
    params = {"Global.use_cls": False, "Global.log_level": "warning"}
    paths = [a for a in args if not a.startswith("--threads=")]
    for a in args:
        if a.startswith("--threads="):
            params["EngineConfig.onnxruntime.intra_op_num_threads"] = int(a.split("=", 1)[1])
    engine = RapidOCR(params=params)
    if paths:
        engine(paths[0], use_cls=False)  # warm-up, as docflow's worker is warm
    for path in paths:
        wall, cpu = time.perf_counter(), time.process_time()
        result = engine(path, use_cls=False)
        cpu = (time.process_time() - cpu) * 1000
        wall = (time.perf_counter() - wall) * 1000
        text = "\n".join(result.txts or ())
        print(json.dumps({"page": path, "ms": wall, "cpu_ms": cpu, "text": text}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
