"""The page at `/`: type or paste text, choose the beam size (and "no repeats"), see the
translation and its interactive attention view, drawn by the attention page's own script
(`viz/attention.js`). One HTML document with everything inline (package data `index.html`): no
CDN, works offline."""

from __future__ import annotations

import html
from importlib.resources import files

from ..viz.page import fill, script_json, view_parts


def render_index(
    model_name: str,
    beam: int,
    max_beam: int,
    no_attention: str | None = None,
    terms_beam: int | None = None,
    no_repeat_ngram: int | None = 0,
) -> str:
    """The page's HTML for a model called `model_name`, offering beams 1..max_beam, `beam`
    chosen, `terms_beam` once terms are typed (the run's `decode.terms_beam`), and "no
    repeats" (checked if the run's `no_repeat_ngram` is set: that n, else 4; None: not offered,
    for a parser); `no_attention`: why the model has no attention to draw (the page says so
    instead)."""
    template = files(__package__).joinpath("index.html").read_text(encoding="utf-8")
    values = {part.upper(): text for part, text in view_parts().items()}
    values["TITLE"] = html.escape(model_name)
    config = {"beam": min(beam, max_beam), "maxBeam": max_beam, "noAttention": no_attention,
              "termsBeam": min(max(terms_beam or beam, beam), max_beam),
              "noRepeat": no_repeat_ngram, "repeatSize": no_repeat_ngram or 4}  # fmt: skip
    values["CONFIG"] = script_json(config)
    return fill(template, values)
