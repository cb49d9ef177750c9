"""Seeing inside a model: attention figures (figs 3-5) as PNG and a self-contained HTML page
(`views.attention_views`), word alignments and their AER, and a step-by-step walk through one
encoder layer (`explain`).

Everything reads attention through the model contract (`AttentionMaps`), for any family. The
figures need matplotlib, so `views` is imported on its own, not here.
"""

from __future__ import annotations

from .alignment import aer, align, pharaoh, translate_with_alignments
from .capture import SentenceAttention, capture, sentence_attention
from .explain import Explanation, explain

__all__ = [
    "Explanation",
    "SentenceAttention",
    "aer",
    "align",
    "capture",
    "explain",
    "pharaoh",
    "sentence_attention",
    "translate_with_alignments",
]
