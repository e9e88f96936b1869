"""How long accepting a question's picture takes in the web process (research/images.py:
sniff, decode, strip metadata, scale to 2048 px, re-encode), for camera-sized JPEGs with EXIF.

    nice -n 5 .venv/bin/python bench/images.py

Prints JSON: per size, the input and output bytes and the median and worst of 5 runs.
research.images imports the models, so Django is set up as for the other benchmarks (on a
database of its own, which the measurement does not use)."""

from __future__ import annotations

import io
import statistics
import sys
import time
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import argument_parser, print_report, setup_django

SIZES = [(1600, 1200), (4000, 3000), (6000, 4500)]
RUNS = 5


def photo(size: tuple[int, int]) -> bytes:
    """A photo-like JPEG (gradients and sensor noise) with a camera make and a GPS position."""
    bands = [
        Image.radial_gradient("L").resize(size),
        Image.effect_noise(size, 6),
        Image.linear_gradient("L").resize(size),
    ]
    exif = Image.Exif()
    exif[0x010F] = "Camera"
    exif[0x8825] = {1: "N", 2: (55.0, 47.0, 19.0)}
    out = io.BytesIO()
    Image.merge("RGB", bands).save(out, format="JPEG", quality=80, exif=exif)
    return out.getvalue()


def main() -> None:
    argument_parser(__doc__).parse_args()
    setup_django("mindsearch_bench_images")
    from research import images

    rows = []
    for size in SIZES:
        data = photo(size)
        times = []
        for _ in range(RUNS):
            started = time.perf_counter()
            prepared = images.prepare(data)
            times.append(time.perf_counter() - started)
        rows.append(
            {
                "megapixels": round(size[0] * size[1] / 1e6, 1),
                "input_bytes": len(data),
                "output_bytes": len(prepared.data),
                "output_size": [prepared.width, prepared.height],
                "median_s": round(statistics.median(times), 3),
                "max_s": round(max(times), 3),
            }
        )
    print_report({"runs": RUNS, "results": rows}, ok=True)


if __name__ == "__main__":
    main()
