"""Seeing inside a model: attention figures (figs 3-5) as PNG and a self-contained HTML page,
word alignments and their AER, and a step-by-step walk through one encoder layer (explain.py).

Everything reads attention through the model contract (`AttentionMaps`), for any family.
"""

from __future__ import annotations

from .alignment import aer, align, pharaoh, translate_with_alignments
from .capture import SentenceAttention, capture, sentence_attention
from .explain import Explanation, explain
from .views import attention_views, draw_attention

__all__ = [
    "Explanation",
    "SentenceAttention",
    "aer",
    "align",
    "attention_views",
    "capture",
    "draw_attention",
    "explain",
    "pharaoh",
    "sentence_attention",
    "translate_with_alignments",
]
