"""Word alignments from cross attention, in Pharaoh format, and their alignment error rate.

A target word is aligned to the source word its cross attention weighs most, averaged over the
heads of one layer: by default the penultimate, the layer that aligns best in published studies
(Garg et al. 2019). The row of a target word is the one that predicts it, as in Garg et al. and
fairseq. Words are the whitespace-separated words of the sentence and of the translation, 0-based;
BOS and EOS take no part. AER is Och & Ney (2003): 1 - (|A & S| + |A & P|) / (|A| + |S|).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from torch import Tensor

from ..config import DecodeConfig
from ..decoding.translate import Translator
from ..lines import sentence_list
from .capture import SentenceAttention, attention_of_ids

Links = set[tuple[int, int]]  # (source word, target word), 0-based


def default_layer(n_layers: int) -> int:
    """The penultimate layer (0-based), or the only one."""
    return max(n_layers - 2, 0)


def align(attention: SentenceAttention, layer: int | None = None) -> list[tuple[int, int]]:
    """(source word, target word) pairs: each target word's argmax source word.

    `attention` must be merged into words (`sentence_attention(..., merge_words=True)`).
    """
    layers = attention.layers["cross"]
    layer = default_layer(len(layers)) if layer is None else layer
    if not -len(layers) <= layer < len(layers):
        raise ValueError(f"alignment layer {layer} out of range: the model has {len(layers)}")
    weights: Tensor = layers[layer].mean(dim=0)  # (target words, source words), heads averaged
    target_labels, source_labels = attention.labels["cross"]
    # Words are numbered as str.split() numbers them: a lone "▁" piece (a run of spaces) makes
    # an empty word, which takes no number, and neither does EOS.
    sources = [j for j, label in enumerate(source_labels) if label not in ("</s>", "")]
    targets = [t for t, label in enumerate(target_labels) if label not in ("</s>", "")]
    pairs = []
    for number, t in enumerate(targets):
        if sources:
            best = max(range(len(sources)), key=lambda n: weights[t, sources[n]].item())
            pairs.append((best, number))
    return pairs


def pharaoh(pairs: Iterable[tuple[int, int]]) -> str:
    """'0-0 1-2 ...' in source order."""
    return " ".join(f"{i}-{j}" for i, j in sorted(pairs))


def translate_with_alignments(
    translator: Translator,
    lines: list[str],
    layer: int | None = None,
    decode: DecodeConfig | None = None,
    prefixes: list[str] | None = None,
    terms: list[list[str]] | None = None,
    avoid: list[str] | None = None,
) -> list[tuple[str, list[tuple[int, int]]]]:
    """Each line's best translation (beam search with `decode`, default the run's settings;
    each line's prefix forced, terms held and `avoid` avoided, if given) and its word
    alignment; an empty line gives ('', [])."""
    lines = sentence_list(lines)
    settings = replace(decode or translator.decode, n_best=1)
    found = translator.hypotheses(lines, settings, prefixes=prefixes, terms=terms, avoid=avoid)
    todo = [i for i, line in enumerate(lines) if line.strip()]
    sources = translator.vocab.encode([lines[i].strip() for i in todo])
    results: list[tuple[str, list[tuple[int, int]]]] = [("", []) for _ in lines]
    for i, src_ids in zip(todo, sources, strict=True):
        best = found[i][0][1]
        attention = attention_of_ids(translator, src_ids, best.tokens, merge_words=True)
        results[i] = (attention.translation, align(attention, layer))
    return results


@dataclass(frozen=True)
class GoldAlignment:
    sure: Links
    possible: Links  # P, the sure links included (S is a subset of P)


def parse_gold(line: str, where: str = "") -> GoldAlignment:
    """'0-0 1?2': sure links written i-j, possible links i?j (p also accepted)."""
    sure, possible = set(), set()
    for item in line.split():
        match = re.fullmatch(r"(\d+)([-?p])(\d+)", item)
        if not match:
            raise ValueError(f"{where}: not an alignment link: {item!r} (expected i-j or i?j)")
        link = (int(match[1]), int(match[3]))
        possible.add(link)
        if match[2] == "-":
            sure.add(link)
    return GoldAlignment(sure, possible)


def parse_links(line: str, where: str = "") -> Links:
    """'0-0 1-2': hypothesis links, all sure."""
    return parse_gold(line, where).possible


def aer(hypotheses: list[Links], gold: list[GoldAlignment]) -> float:
    """Corpus alignment error rate (Och & Ney 2003), counts summed over sentences."""
    if len(hypotheses) != len(gold):
        raise ValueError(f"{len(hypotheses)} hypothesis lines but {len(gold)} gold lines")
    a_and_s = a_and_p = size_a = size_s = 0
    for links, ref in zip(hypotheses, gold, strict=True):
        a_and_s += len(links & ref.sure)
        a_and_p += len(links & ref.possible)
        size_a += len(links)
        size_s += len(ref.sure)
    if size_a + size_s == 0:
        return 0.0
    return 1.0 - (a_and_s + a_and_p) / (size_a + size_s)


def aer_of_files(hyp: Path, ref: Path) -> float:
    """AER of a Pharaoh file against a gold file (i-j sure, i?j possible), line by line.

    A hypothesis line may be `translation ||| links`, as `translate --alignments` writes it.
    """
    hyp_lines = Path(hyp).read_text(encoding="utf-8").splitlines()
    ref_lines = Path(ref).read_text(encoding="utf-8").splitlines()
    hypotheses = [
        parse_links(line.rsplit("|||", 1)[-1], f"{hyp}:{n}")
        for n, line in enumerate(hyp_lines, start=1)
    ]
    gold = [parse_gold(line, f"{ref}:{n}") for n, line in enumerate(ref_lines, start=1)]
    if len(hypotheses) != len(gold):
        raise ValueError(f"{hyp} has {len(hypotheses)} lines but {ref} has {len(gold)}")
    return aer(hypotheses, gold)
