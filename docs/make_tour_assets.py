"""Regenerate the guided tour's figures and its explain output.

    python docs/make_tour_assets.py --model runs/ende      # a run folder or one checkpoint file

Draws the attention of a trained model on a Multi30k test sentence (teacher-forced on its
reference translation, so the figures show what the model attends to while reading a good
German sentence, however far it has trained) into docs/img/, and writes `transduce explain`'s
output for the tour's sentence between the `explain` markers of tour.md and tour.ja.md. The
tests check that those blocks are what `explain` prints now.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from PIL import Image

from transduce.decoding.translate import Translator
from transduce.viz.capture import sentence_attention
from transduce.viz.explain import explain
from transduce.viz.views import draw_attention

DOCS = Path(__file__).resolve().parent
TOURS = [DOCS / "tour.md", DOCS / "tour.ja.md"]
# Multi30k test_2016_flickr, line 2 (lowercased, tokenized), and its reference translation.
SENTENCE = "a boston terrier is running on lush green grass in front of a white fence ."
REFERENCE = "ein boston terrier läuft über saftig-grünes gras vor einem weißen zaun ."
FIGURES = ["encoder_lines.png", "encoder_grid.png", "decoder_heatmap.png", "cross_heatmap.png"]
# The tour's step-by-step example: the random tiny model, seeded, as `transduce explain` runs it.
EXPLAIN_SENTENCE = "the cat sat"
EXPLAIN_MARKERS = ("<!-- explain:begin -->", "<!-- explain:end -->")


def explain_block() -> str:
    """What the tours show between their markers: the command and its output."""
    output = explain(EXPLAIN_SENTENCE, seed=0, d_model=4, heads=2).text()
    command = f'transduce explain --sentence "{EXPLAIN_SENTENCE}" --seed 0 --d-model 4 --heads 2'
    return f"```text\n$ {command}\n{output}\n```"


def write_explain(tour: Path) -> None:
    text = tour.read_text(encoding="utf-8")
    begin, end = EXPLAIN_MARKERS
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    tour.write_text(f"{head}{begin}\n{explain_block()}\n{end}{tail}", encoding="utf-8")


def draw_figures(model: Path, out: Path, layer: int | None) -> None:
    translator = Translator.load(model, device="cpu")
    attention = sentence_attention(translator, SENTENCE, REFERENCE, merge_words=True)
    with tempfile.TemporaryDirectory() as folder:
        draw_attention(attention, Path(folder), layer)
        out.mkdir(parents=True, exist_ok=True)
        for name in FIGURES:  # 256 colours: a fraction of the bytes, the same picture
            Image.open(Path(folder) / name).convert("RGB").quantize(256).save(out / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a trained run folder or checkpoint file")
    parser.add_argument("--out", type=Path, default=DOCS / "img")
    parser.add_argument("--layer", type=int, help="default: the penultimate")
    args = parser.parse_args()
    if args.model:
        draw_figures(args.model, args.out, args.layer)
    for tour in TOURS:
        write_explain(tour)


if __name__ == "__main__":
    main()
