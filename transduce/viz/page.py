"""The interactive attention page: one self-contained HTML file (inline JSON, SVG and vanilla
JavaScript; no network). The template is the package data file `attention.html`; the view's
style, elements and drawing script (`attention.css`, `attention_view.html`, `attention.js`) are
separate files so that `transduce serve`'s page embeds the same drawing."""

from __future__ import annotations

import html
import json
import re
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


def view_parts() -> dict[str, str]:
    """The attention view as three texts to inline into a page: "style" (CSS), "view" (its
    elements) and "script" (JavaScript defining `showAttention(page_data)`)."""
    package = files(__package__)
    names = {"style": "attention.css", "view": "attention_view.html", "script": "attention.js"}
    return {
        part: package.joinpath(name).read_text(encoding="utf-8") for part, name in names.items()
    }


def script_json(value: object) -> str:
    """JSON that may stand inside a <script> element, where "</" may not: "<\\/" is the same."""
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


def fill(template: str, values: dict[str, str]) -> str:
    """`template` with each __NAME__ replaced by values["NAME"], in one pass: a value that
    itself holds a placeholder's name (a sentence may) is left as it is."""
    return re.sub(r"__([A-Z]+)__", lambda found: values.get(found[1], found[0]), template)


def render_page(attention: SentenceAttention, layer: int) -> str:
    """The page's HTML text, the weights inline."""
    template = files(__package__).joinpath("attention.html").read_text(encoding="utf-8")
    values = {part.upper(): text for part, text in view_parts().items()}
    values["TITLE"] = html.escape(attention.source)
    values["DATA"] = script_json(page_data(attention, layer))
    return fill(template, values)


def write_page(attention: SentenceAttention, layer: int, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(attention, layer), encoding="utf-8")
    return path
