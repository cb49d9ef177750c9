"""The model contract (models/contract.py), checked on every model family the same way.

Families: the Transformer (post-norm; pre-norm with learned positions), the recurrent family in
configurations that between them take every score, input feeding on and off, both encoder
directions, both decoder initialisations and both cells, the scripted fake of tests/fakes.py,
and ensembles (models/ensemble.py) of one family and of three.
"""

import pytest
import torch

from transduce.models.contract import Cache, Seq2Seq
from transduce.models.ensemble import Ensemble

from .conftest import BOS, EOS, PAD, tiny_model, tiny_rnn
from .fakes import ScriptedSeq2Seq

FAMILIES = {
    "transformer": lambda: tiny_model(0),
    "transformer-pre-norm-learned": lambda: tiny_model(
        1, pre_norm=True, positions="learned", max_positions=64
    ),
    "scripted": lambda: ScriptedSeq2Seq(vocab_size=12, seed=0),
    "rnn-general-feeding": lambda: tiny_rnn(0),
    "rnn-dot": lambda: tiny_rnn(1, score="dot", input_feeding=False),
    "rnn-concat-bidirectional-bridge": lambda: tiny_rnn(
        2, score="concat", bidirectional=True, decoder_init="bridge"
    ),
    "rnn-additive-bahdanau": lambda: tiny_rnn(
        3, score="additive", input_feeding=False, bidirectional=True, decoder_init="bridge"
    ),
    "rnn-gru-dot-projected-feeding": lambda: tiny_rnn(
        4, cell="gru", score="dot", bidirectional=True, memory_projection=True
    ),
    "rnn-gru-general-bridge": lambda: tiny_rnn(
        5, cell="gru", input_feeding=False, decoder_init="bridge", n_layers=1
    ),
    "ensemble-of-two-transformers": lambda: Ensemble([tiny_model(6), tiny_model(7)]),
    "ensemble-of-three-families": lambda: Ensemble(
        [tiny_model(8), tiny_rnn(9, bidirectional=True), ScriptedSeq2Seq(vocab_size=12, seed=4)]
    ),
}
# Attention of different shapes (layers, heads) has no mean: that ensemble refuses to show it.
NO_ATTENTION_MAPS = {"ensemble-of-three-families"}


@pytest.fixture(params=sorted(FAMILIES))
def model(request) -> Seq2Seq:
    model = FAMILIES[request.param]()
    model.family = request.param
    return model


def _sources() -> torch.Tensor:
    """Three sentences of different lengths, padded: (3, 6)."""
    return torch.tensor(
        [
            [5, 6, 7, 8, 9, EOS],
            [4, 11, EOS, PAD, PAD, PAD],
            [10, 9, 8, EOS, PAD, PAD],
        ]
    )


def _targets(rows: int, length: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, 12, (rows, length - 1), generator=generator)
    return torch.cat([torch.full((rows, 1), BOS), tokens], dim=1)


def _alone(src_row: torch.Tensor) -> torch.Tensor:
    return src_row[src_row != PAD][None]  # (1, S_i): the sentence without its padding


def test_every_family_implements_the_contract(model):
    assert isinstance(model, Seq2Seq)
    assert isinstance(model.init_cache(model.encode(_sources())), Cache)


SEQ2SEQ = ("pad", "max_positions", "forward", "encode", "init_cache", "step", "attention_maps")


def _stand_in(members: tuple[str, ...]) -> object:
    return type("StandIn", (), {name: lambda self, *args: None for name in members})()


def test_a_model_or_cache_missing_any_part_of_the_contract_does_not_implement_it():
    """The isinstance check is how a new family learns what it lacks: every member counts."""
    assert isinstance(_stand_in(SEQ2SEQ), Seq2Seq)
    for missing in SEQ2SEQ:
        assert not isinstance(_stand_in(tuple(set(SEQ2SEQ) - {missing})), Seq2Seq), missing
    assert isinstance(_stand_in(("reorder",)), Cache) and not isinstance(_stand_in(()), Cache)


def test_cached_decoding_equals_the_full_forward_pass(model):
    src, tgt = _sources(), _targets(3, 7)
    full = model(src, tgt)
    cache = model.init_cache(model.encode(src))
    steps = [model.step(tgt[:, t : t + 1], cache) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=0, atol=1e-10)


def test_a_batch_decodes_as_each_sentence_alone(model):
    src, tgt = _sources(), _targets(3, 5, seed=1)
    batch = model(src, tgt)
    cache = model.init_cache(model.encode(src))
    stepped = torch.stack([model.step(tgt[:, t : t + 1], cache) for t in range(5)], dim=1)
    for i in range(3):
        alone = model(_alone(src[i]), tgt[i : i + 1])
        torch.testing.assert_close(batch[i], alone[0], rtol=0, atol=1e-10)
        torch.testing.assert_close(stepped[i], alone[0], rtol=0, atol=1e-10)


def test_a_cache_made_for_beams_gives_every_beam_its_sentence(model):
    """`init_cache(encoded, group)`: `group` consecutive rows per sentence, each as the sentence
    alone (a zero or a bridged first state, the source once per sentence)."""
    src, tgt = _sources(), _targets(3, 4, seed=3)
    full = model(src, tgt).repeat_interleave(2, dim=0)
    rows = tgt.repeat_interleave(2, dim=0)
    cache = model.init_cache(model.encode(src), 2)
    steps = [model.step(rows[:, t : t + 1], cache) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=0, atol=1e-10)


def _recomputed(model, src, sentence_of_row, prefixes):
    """Each row's next-token logits, recomputed from scratch: its sentence alone, its prefix."""
    rows = []
    for sentence, prefix in zip(sentence_of_row, prefixes, strict=True):
        rows.append(model(_alone(src[sentence]), torch.tensor([prefix]))[0, -1])
    return torch.stack(rows)


# Reorders in the shapes beam search makes them: (rows kept, rows per sentence from then on).
REORDERS = [
    ([0, 0, 1, 1, 2, 2], 2),  # widen one row per sentence into two beams
    ([1, 0, 5, 5], None),  # swap sentence 0's beams, drop sentence 1, duplicate a beam
    ([1, 1, 3, 2], None),  # steady state: as many rows as before, a new selection
    ([0, 1, 0, 3, 2, 3], 3),  # widen again, both sentences
    ([4, 3, 5], None),  # drop sentence 0
]


def test_reordering_equals_recomputing_from_the_selected_prefixes(model):
    src = _sources()
    generator = torch.Generator().manual_seed(2)
    cache = model.init_cache(model.encode(src), 1)
    sentence_of_row, prefixes = [0, 1, 2], [[BOS], [BOS], [BOS]]
    logits = model.step(torch.full((3, 1), BOS), cache)
    torch.testing.assert_close(logits, _recomputed(model, src, sentence_of_row, prefixes))
    for index, group in REORDERS:
        cache.reorder(torch.tensor(index), group)
        sentence_of_row = [sentence_of_row[i] for i in index]
        prefixes = [list(prefixes[i]) for i in index]
        tokens = torch.randint(4, 12, (len(index), 1), generator=generator)
        for prefix, token in zip(prefixes, tokens.flatten().tolist(), strict=True):
            prefix.append(token)
        logits = model.step(tokens, cache)
        expected = _recomputed(model, src, sentence_of_row, prefixes)
        torch.testing.assert_close(logits, expected, rtol=0, atol=1e-10)


def test_cross_attention_is_a_distribution_over_the_real_source_positions(model):
    src, tgt = _sources(), _targets(3, 4)
    if model.family in NO_ATTENTION_MAPS:
        with pytest.raises(ValueError, match="attend differently"):
            model.attention_maps(src, tgt)
        return
    logits, maps = model.attention_maps(src, tgt)
    torch.testing.assert_close(logits, model(src, tgt), rtol=0, atol=1e-12)
    assert maps.decoder_cross
    real = (src != PAD)[:, None, None, :]  # (B, 1, 1, S)
    for weights in maps.decoder_cross + maps.encoder_self:
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]))
        assert weights.masked_select(~real.expand_as(weights)).abs().max() == 0
    for weights in maps.decoder_self:  # no weight on the future
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]))
        assert torch.triu(weights, diagonal=1).abs().max() == 0
