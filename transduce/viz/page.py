"""The interactive attention page: one self-contained HTML file (inline JSON, SVG and vanilla
JavaScript; no network). The template is the package data file `attention.html`."""

from __future__ import annotations

import html
import json
from importlib.resources import files
from pathlib import Path

from .capture import SentenceAttention

# The axes of each kind, as the page names them.
AXES = {
    "encoder": ("source (query)", "source (key)"),
    "decoder": ("target input (query)", "target input (key)"),
    "cross": ("target (predicting)", "source"),
}


def page_data(attention: SentenceAttention, layer: int) -> dict:
    """What the page draws: per kind, the labels and every layer's (head, query, key) weights."""
    views = {}
    for kind, layers in attention.layers.items():
        queries, keys = attention.labels[kind]
        views[kind] = {
            "queries": queries,
            "keys": keys,
            "queryName": AXES[kind][0],
            "keyName": AXES[kind][1],
            "layers": [
                [[[round(float(v), 4) for v in row] for row in head] for head in w] for w in layers
            ],
        }
    return {
        "source": attention.source,
        "translation": attention.translation,
        "layer": layer,
        "views": views,
    }


def render_page(attention: SentenceAttention, layer: int) -> str:
    """The page's HTML text, the weights inline."""
    template = files(__package__).joinpath("attention.html").read_text(encoding="utf-8")
    # "</" may not appear inside a <script> element; "<\/" is the same JSON string.
    payload = json.dumps(page_data(attention, layer), ensure_ascii=False).replace("</", "<\\/")
    return template.replace("__TITLE__", html.escape(attention.source)).replace("__DATA__", payload)


def write_page(attention: SentenceAttention, layer: int, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(attention, layer), encoding="utf-8")
    return path
