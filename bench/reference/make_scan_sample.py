"""Makes samples/scan-delivery-note.png: a page without a text layer, as a scanner delivers
it (grey, slightly rotated, speckled), for `make run` to show the OCR path.

    python -m venv /tmp/pil && /tmp/pil/bin/pip install pillow
    /tmp/pil/bin/python bench/reference/make_scan_sample.py samples/scan-delivery-note.png
"""

import random
import sys

from PIL import Image, ImageDraw, ImageFont

LINES = [
    "DELIVERY NOTE 7731",
    "Northwind Logistics, Dock 4, Rotterdam",
    "Delivered on 12 November 2026 to Contoso Ltd.",
    "12 pallets of printer paper, 3 boxes of toner.",
    "Received in good condition. Signed: J. Meyer",
]


def main(out):
    random.seed(7)
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 30)
    page = Image.new("L", (1240, 520), 255)
    draw = ImageDraw.Draw(page)
    y = 60
    for line in LINES:
        draw.text((90, y), line, font=font, fill=30)
        y += 80
    page = page.rotate(0.6, resample=Image.BICUBIC, fillcolor=255)
    pixels = page.load()
    for _ in range(3000):
        x, y = random.randrange(page.width), random.randrange(page.height)
        pixels[x, y] = random.randrange(120, 220)
    page.save(out, optimize=True)


if __name__ == "__main__":
    main(sys.argv[1])
