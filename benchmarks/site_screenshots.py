"""Retake the docs' screenshots of the leaderboard site from the pages as they are now.

The README shows the site's index on a laptop (docs/leaderboard-site.png) and docs/leaderboard.md
the same page on a phone (docs/leaderboard-site-phone.png). After a change to the site, rebuild
it, then retake both in headless Chromium (Debian: apt-get install chromium), offline:
    python -m lenbench.leaderboard --results leaderboard/results --out leaderboard
    python benchmarks/site_screenshots.py [--site leaderboard] [--out docs]
Each PNG is the first screen of the page at that width, reduced to 256 colours to stay small.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the DevTools driver the browser tests use

from helpers.browser import Chromium, find_chromium

# (page, width, height, file): the laptop view the README shows, the phone view the docs show
SHOTS = (("index.html", 1280, 900, "leaderboard-site.png"),
         ("index.html", 390, 844, "leaderboard-site-phone.png"))

# images on the first screen have loaded (lazy ones below it need not)
SHOWN_IMAGES_LOADED = ("Array.from(document.images).every(function (i) {"
                       " return i.complete || i.getBoundingClientRect().top > innerHeight; })")


def take(browser: Chromium, page_path: Path, width: int, height: int) -> bytes:
    """The first screen of a page at `width` x `height` CSS pixels, as an 8-bit PNG."""
    from PIL import Image

    browser.size = (width, height)
    page = browser.open(page_path.resolve().as_uri())
    page.wait_for(f"window.innerWidth === {width}")
    page.wait_for(SHOWN_IMAGES_LOADED)
    time.sleep(0.3)  # one more frame for the last image to paint
    image = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    out = io.BytesIO()
    image.quantize(256, method=Image.Quantize.FASTOCTREE).save(out, format="PNG", optimize=True)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "leaderboard",
                        help="folder holding index.html (default: the published leaderboard)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs",
                        help="folder the PNGs are written to (default: docs)")
    args = parser.parse_args()
    exe = find_chromium()
    if exe is None:
        sys.exit("Chromium is not installed (Debian: apt-get install chromium)")
    with Chromium(exe) as browser:
        for name, width, height, file in SHOTS:
            target = args.out / file
            target.write_bytes(take(browser, args.site / name, width, height))
            print(f"wrote {target} ({width}x{height}, {name})")


if __name__ == "__main__":
    main()
