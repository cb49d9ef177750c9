"""Regenerate the README's screenshot of the page `transduce serve` answers at `/`.

    python docs/make_serve_screenshot.py --model runs/ende      # a run folder or checkpoint file

Serves the model on loopback, opens the page in headless Chromium (Debian's `chromium`, driven by
Playwright), types a Multi30k test sentence, picks beam 4, and saves what it shows (the
translation and its interactive attention view) as docs/img/serve.png.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright

from transduce.serve.engine import Engine
from transduce.serve.server import Background

DOCS = Path(__file__).resolve().parent
# Multi30k test_2016_flickr, lines 1 and 2 (raw text).
SENTENCES = [
    "A man in an orange hat starring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=DOCS / "img/serve.png")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with Background(Engine.load(args.model)) as url, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "/")
        page.fill("#text", "\n".join(SENTENCES))
        page.select_option("#beam", "4")
        page.click("#go")
        page.wait_for_selector("#attention:not([hidden])")
        page.wait_for_selector("#links line", state="attached")
        page.click("#kinds button[data-kind='cross']")
        page.screenshot(path=str(args.out), full_page=True)
        browser.close()
    print(args.out)


if __name__ == "__main__":
    main()
