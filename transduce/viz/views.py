"""`transduce attention`: one sentence's attention as PNG figures and one interactive page.

Every kind of attention the model has is drawn (a family with only cross attention, such as the
recurrent baseline, gets only that view); nothing here asks which family it holds.
"""

from __future__ import annotations

from pathlib import Path

from ..decoding.translate import Translator
from .alignment import default_layer
from .capture import SentenceAttention, sentence_attention
from .figures import grid_figure, heatmap_figure, lines_figure, side_by_side_figure
from .page import AXES, write_page

TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "encoder-decoder attention",
}


def draw_attention(attention: SentenceAttention, out: Path, layer: int | None = None) -> list[Path]:
    """The figures and the page for `attention` in folder `out`; returns the files written.

    `layer` (default: the penultimate, as the paper's figures 3-5 show layer 5 of 6) is the layer
    of the line figure and the heatmaps, in each stack (its last in a shallower stack: an encoder
    may be deeper than its decoder); the grids show every layer.
    """
    out = Path(out)
    _check_layer(attention, layer)
    written = []
    if "encoder" in attention.layers:
        labels = attention.labels["encoder"][0]
        at = _layer_in(attention.layers["encoder"], layer)
        weights = attention.layers["encoder"][at]
        written.append(lines_figure(weights, labels, at, out / "encoder_lines.png"))
    for kind, layers in attention.layers.items():
        queries, keys = attention.labels[kind]
        at = _layer_in(layers, layer)
        mean = layers[at].mean(dim=0)  # (Tq, Tk), heads averaged
        title = f"{TITLES[kind]}, layer {at}, heads averaged"
        names = f"{AXES[kind][0]} / {AXES[kind][1]}"
        written.append(
            heatmap_figure(mean, queries, keys, out / f"{kind}_heatmap.png", title, names)
        )
        grid = out / f"{kind}_grid.png"
        written.append(grid_figure(layers, queries, keys, grid, f"{TITLES[kind]}: layers x heads"))
    page_layer = default_layer(attention.n_layers) if layer is None else layer
    written.append(write_page(attention, page_layer, out / "attention.html"))
    return written


def attention_views(
    translator: Translator,
    sentence: str,
    out: Path,
    target: str | None = None,
    layer: int | None = None,
    merge_words: bool = False,
) -> list[Path]:
    """Translate `sentence` (or take `target`), capture the attention, draw it into `out`."""
    attention = sentence_attention(translator, sentence, target, merge_words)
    return draw_attention(attention, out, layer)


def side_by_side(
    models: list[tuple[str, Translator]],
    sentence: str,
    path: Path,
    target: str | None = None,
    merge_words: bool = True,
) -> Path:
    """Encoder-decoder attention of several models on one sentence, beside each other (say the
    Transformer's and the LSTM's alpha_ij). Every model reads the same target (`target`, else the
    first model's translation), so the rows match; each panel is that model's penultimate layer
    (its only one for a one-layer family), heads averaged. Words, not sub-words, by default: two
    models need not share a vocabulary."""
    first_name, first = models[0]
    attention = sentence_attention(first, sentence, target, merge_words)
    target = attention.translation if target is None else target
    panels = []
    for name, translator in models:
        if translator is not first:
            attention = sentence_attention(translator, sentence, target, merge_words)
        layer = _layer_in(attention.layers["cross"], None)
        queries, keys = attention.labels["cross"]
        weights = attention.layers["cross"][layer].mean(dim=0)
        panels.append((weights, queries, keys, f"{name}: layer {layer}, heads averaged"))
    title = f"encoder-decoder attention on the translation of {first_name}"
    return side_by_side_figure(panels, Path(path), title)


def _check_layer(attention: SentenceAttention, layer: int | None) -> None:
    n = attention.n_layers
    if layer is not None and not 0 <= layer < n:
        raise ValueError(f"--layer {layer}: the model has layers 0 to {n - 1}")


def _layer_in(layers: list, layer: int | None) -> int:
    """`layer` in one stack: its penultimate by default, its last where the stack is shallower."""
    return default_layer(len(layers)) if layer is None else min(layer, len(layers) - 1)
