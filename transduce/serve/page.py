"""The page at `/`: type or paste text, choose the beam size, see the translation and its
interactive attention view, drawn by the attention page's own script (`viz/attention.js`).
One HTML document with everything inline (package data `index.html`): no CDN, works offline."""

from __future__ import annotations

import html
from importlib.resources import files

from ..viz.page import fill, script_json, view_parts


def render_index(model_name: str, beam: int, max_beam: int) -> str:
    """The page's HTML for a model called `model_name`, offering beams 1..max_beam."""
    template = files(__package__).joinpath("index.html").read_text(encoding="utf-8")
    values = {part.upper(): text for part, text in view_parts().items()}
    values["TITLE"] = html.escape(model_name)
    values["CONFIG"] = script_json({"beam": min(beam, max_beam), "maxBeam": max_beam})
    return fill(template, values)
