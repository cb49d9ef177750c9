"""The attention weights a model used for one sentence and its translation, read through the
contract (`Seq2Seq.attention_maps`), whatever the family.

The weights come from a teacher-forced pass over the target, which equals the cached decoding that
produced it (a contract test), so they are the weights the translation was made with; the pass
runs apart from decoding, so capturing them changes no output.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.batching import collate
from ..decoding.translate import Translator, decode_ids
from ..models.contract import AttentionMaps, Seq2Seq
from .words import Words, group_pieces, identity_words, merge_weights

# The three kinds of attention, with their query and key sides (s3.2.3).
KINDS = ("encoder", "decoder", "cross")


@torch.no_grad()
def capture(model: Seq2Seq, src: Tensor, tgt_in: Tensor) -> AttentionMaps:
    """Every attention weight of a teacher-forced pass: src (B, S), tgt_in (B, T).

    Returns maps of (B, heads, Tq, Tk) per layer, detached, in float32 or wider, on the CPU.
    """
    _, maps = model.attention_maps(src, tgt_in)

    def host(weights: list[Tensor]) -> list[Tensor]:
        return [w.detach().cpu().to(torch.promote_types(w.dtype, torch.float32)) for w in weights]

    return AttentionMaps(host(maps.decoder_cross), host(maps.encoder_self), host(maps.decoder_self))


@dataclass
class SentenceAttention:
    """One sentence's attention: per kind, a list over layers of (heads, queries, keys) weights,
    with the labels of the queries and keys (sub-words, or words after `merged`)."""

    source: str
    translation: str
    layers: dict[str, list[Tensor]]  # kind -> [(h, Tq, Tk)] per layer; absent kinds left out
    labels: dict[str, tuple[list[str], list[str]]]  # kind -> (query labels, key labels)

    @property
    def n_layers(self) -> int:
        """The deepest stack's layers (an encoder may be deeper than its decoder)."""
        return max(len(maps) for maps in self.layers.values())

    def merged(self, sides: dict[str, Words]) -> SentenceAttention:
        """The same weights over words: `sides` maps "source", "target_in", "target_out" to
        the grouping of that side's pieces."""
        layers, labels = {}, {}
        for kind, maps in self.layers.items():
            query_side, key_side = _SIDES[kind]
            queries, keys = sides[query_side], sides[key_side]
            layers[kind] = [merge_weights(w, queries, keys) for w in maps]
            labels[kind] = (queries.labels, keys.labels)
        return SentenceAttention(self.source, self.translation, layers, labels)


# Queries and keys of each kind. A cross-attention row is labelled with the word it predicts
# (target_out), as alignments read it; self-attention rows and keys are the decoder's inputs.
_SIDES = {
    "encoder": ("source", "source"),
    "decoder": ("target_in", "target_in"),
    "cross": ("target_out", "source"),
}


def sentence_attention(
    translator: Translator, sentence: str, target: str | None = None, merge_words: bool = False
) -> SentenceAttention:
    """The attention of `translator`'s model on `sentence` and `target` (default: the model's
    own best translation, as beam search made it)."""
    if not sentence.strip():
        raise ValueError("the sentence is empty: there is no attention to draw")
    vocab = translator.vocab
    src_ids = vocab.encode([sentence.strip()])[0]
    if target is None:
        tgt_ids = best_translations(translator, [src_ids])[0]
    else:
        tgt_ids = vocab.encode([target.strip()])[0]
    return attention_of_ids(translator, src_ids, tgt_ids, merge_words)


def best_translations(
    translator: Translator, sources: list[list[int]], decode: DecodeConfig | None = None
) -> list[list[int]]:
    """The ids of each source's best translation: beam search with `decode` (default: the
    run's settings)."""
    settings = replace(decode or translator.decode, n_best=1)
    found = decode_ids(
        translator.model,
        translator.vocab,
        sources,
        settings,
        translator.device,
        translator.packed_weights,
        translator.int8_weights,
    )
    return [hypotheses[0].tokens for hypotheses in found]


def attention_of_ids(
    translator: Translator, src_ids: list[int], tgt_ids: list[int], merge_words: bool = False
) -> SentenceAttention:
    """The attention on source and target ids (both without BOS and EOS)."""
    vocab = translator.vocab
    batch = collate([(src_ids, tgt_ids)], vocab.pad, vocab.bos, vocab.eos)
    device = translator.device
    maps = capture(translator.model, batch.src.to(device), batch.tgt_in.to(device))
    pieces = {
        "source": [*vocab.pieces(src_ids), "</s>"],
        "target_in": ["<s>", *vocab.pieces(tgt_ids)],
        "target_out": [*vocab.pieces(tgt_ids), "</s>"],
    }
    found = {
        "encoder": maps.encoder_self,
        "decoder": maps.decoder_self,
        "cross": maps.decoder_cross,
    }
    layers = {kind: [w[0] for w in found[kind]] for kind in KINDS if found[kind]}
    labels = {kind: (pieces[_SIDES[kind][0]], pieces[_SIDES[kind][1]]) for kind in layers}
    source, translation = vocab.decode([src_ids, tgt_ids])
    attention = SentenceAttention(source, translation, layers, labels)
    grouping = group_pieces if merge_words else identity_words
    return attention.merged({side: grouping(p) for side, p in pieces.items()})
