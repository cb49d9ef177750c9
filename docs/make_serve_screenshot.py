"""Regenerate the README's screenshot of the page `transduce serve` answers at `/`.

    python docs/make_serve_screenshot.py --model runs/ende      # a run folder or checkpoint file
    python docs/make_serve_screenshot.py --model runs/ende-tok --tokenized   # a `tok` model

Serves the model on loopback, opens the page in headless Chromium (Debian's `chromium`, driven by
Playwright), types two Multi30k test sentences, picks beam 4, and saves what it shows (the
translations and the interactive attention view) as docs/img/serve.png; then types the second
sentence alone with the start of a translation for the model to complete, and saves that as
docs/img/serve-prefix.png; then the same sentence with terms its translation must hold,
docs/img/serve-terms.png. `--tokenized`: the sentences as the `tok` variant has them
(lowercased, tokenized), for a model trained on it.
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
TOKENIZED = [
    "a man in an orange hat starring at something .",
    "a boston terrier is running on lush green grass in front of a white fence .",
]
# Typed so far, its last word unfinished (the reference has "Ein Boston Terrier").
PREFIX = {False: "Ein kleiner Hu", True: "ein kleiner hu"}
# Words the model itself does not write ("ein terrier läuft auf dem grünen gras"): the reference's
# breed, and a glossary's word for grass.
TERMS = {False: "Boston Terrier; Rasen", True: "boston terrier; rasen"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=DOCS / "img/serve.png")
    parser.add_argument("--prefix-out", type=Path, default=DOCS / "img/serve-prefix.png")
    parser.add_argument("--terms-out", type=Path, default=DOCS / "img/serve-terms.png")
    parser.add_argument("--tokenized", action="store_true")
    args = parser.parse_args()
    sentences = TOKENIZED if args.tokenized else SENTENCES
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with Background(Engine.load(args.model)) as url, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "/")
        page.fill("#text", "\n".join(sentences))
        page.select_option("#beam", "4")
        _translate_and_shoot(page, args.out)
        page.fill("#text", sentences[1])
        page.fill("#prefix", PREFIX[args.tokenized])
        _translate_and_shoot(page, args.prefix_out)
        page.fill("#prefix", "")
        page.fill("#terms", TERMS[args.tokenized])
        _translate_and_shoot(page, args.terms_out)
        browser.close()
    print(args.out, args.prefix_out, args.terms_out)


def _translate_and_shoot(page, out: Path) -> None:
    """Translate, wait for the attention view, show encoder-decoder attention, save."""
    page.click("#go")
    page.wait_for_selector("#go:enabled")
    page.wait_for_selector("#attention:not([hidden])")
    page.wait_for_selector("#links line", state="attached")
    page.click("#kinds button[data-kind='cross']")
    page.screenshot(path=str(out), full_page=True)


if __name__ == "__main__":
    main()
