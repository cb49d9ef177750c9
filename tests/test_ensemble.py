"""Ensembles (models/ensemble.py): the mean of the members' next-token probabilities, searched
as one model, loaded from saved runs that share a vocabulary and a task, and refused otherwise.

The contract itself (cached equals full, padding, beams, reordering) is checked on ensembles with
every other family in test_contract.py."""

import itertools

import pytest
import torch

import transduce
from transduce.cli import main
from transduce.config import DecodeConfig, TaskConfig
from transduce.data.bpe import train_joint
from transduce.decoding.search import beam_search, length_penalty
from transduce.decoding.translate import Translator
from transduce.models.ensemble import Ensemble, load_ensemble
from transduce.models.transformer import Transformer
from transduce.viz.alignment import translate_with_alignments

from .conftest import (
    BOS,
    EOS,
    PAD,
    TOY_WORDS,
    save_seeded_model,
    tiny_model,
    tiny_rnn,
    toy_vocab,
    write_lines,
)
from .fakes import ScriptedSeq2Seq

SPECIALS = dict(bos=BOS, eos=EOS, pad=PAD)


def _sources() -> torch.Tensor:
    return torch.tensor([[5, 6, 7, 8, EOS], [4, 11, EOS, PAD, PAD], [10, 9, EOS, PAD, PAD]])


def _tgt_in() -> torch.Tensor:
    return torch.tensor([[BOS, 4, 5, 6], [BOS, 7, 7, 8], [BOS, 11, 10, 9]])


def test_the_ensemble_predicts_the_mean_of_its_members_probabilities():
    members = [tiny_model(0), tiny_rnn(1), ScriptedSeq2Seq(vocab_size=12, seed=2)]
    ensemble = Ensemble(members)
    src, tgt_in = _sources(), _tgt_in()
    mean = sum(torch.softmax(m(src, tgt_in), -1) for m in members) / 3  # (B, T, V)
    torch.testing.assert_close(ensemble(src, tgt_in), mean.log(), rtol=0, atol=1e-12)
    cache = ensemble.init_cache(ensemble.encode(src))
    for t in range(tgt_in.size(1)):
        step = ensemble.step(tgt_in[:, t : t + 1], cache)
        torch.testing.assert_close(step, mean[:, t].log(), rtol=0, atol=1e-12)
    # Not the mean of the logits (a product of experts), nor of the log-probabilities.
    logits_mean = torch.log_softmax(sum(m(src, tgt_in) for m in members) / 3, -1)
    assert (ensemble(src, tgt_in) - logits_mean).abs().max() > 1e-3


def test_an_ensemble_of_one_searches_as_its_member():
    member = tiny_model(4)
    src = _sources()
    settings = dict(SPECIALS, beam_size=3, alpha=0.6, max_len_b=6, n_best=3)
    alone = beam_search(member, src, **settings)
    ensembled = beam_search(Ensemble([member]), src, **settings)
    for ours, theirs in zip(ensembled, alone, strict=True):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        assert [h.score for h in ours] == [h.score for h in theirs]  # bit for bit


def _teacher_forced_log_prob(model, src, tokens):
    tgt = torch.tensor([[BOS, *tokens, EOS]])
    log_probs = torch.log_softmax(model(src, tgt[:, :-1]), dim=-1)[0]
    return log_probs.gather(1, tgt[0, 1:, None]).sum().item()


def test_a_wide_beam_over_an_ensemble_finds_the_exhaustive_best():
    """Beam search over two models' mean finds the sequence that their mean, scored by teacher
    forcing, ranks first among every sequence up to the length limit: here one neither member
    would choose alone (the seeded tiny networks all end at once, so scripted models)."""
    ensemble = Ensemble([ScriptedSeq2Seq(vocab_size=6, seed=5), ScriptedSeq2Seq(6, seed=19)])
    src = torch.tensor([[4, 5, EOS]])
    limit, alpha = 4, 1.0
    candidates = [list(t) for n in range(limit) for t in itertools.product([1, 4, 5], repeat=n)]
    scores = {
        tuple(t): _teacher_forced_log_prob(ensemble, src, t) / length_penalty(len(t) + 1, alpha)
        for t in candidates
    }
    found = beam_search(
        ensemble, src, **SPECIALS, beam_size=3**limit, alpha=alpha, max_len_a=0, max_len_b=limit,
        n_best=3**limit,
    )[0]  # fmt: skip
    assert len(found) == len(candidates)
    assert found[0].tokens == list(max(scores, key=scores.get))
    for hyp in found:
        assert hyp.score == pytest.approx(scores[tuple(hyp.tokens)], rel=1e-6)  # float32 sums
    alone = [
        beam_search(m, src, **SPECIALS, beam_size=81, alpha=alpha, max_len_a=0, max_len_b=limit)
        for m in ensemble.members
    ]
    assert [best[0][0].tokens for best in alone] == [[5], [4, 5, 4]]
    assert found[0].tokens == [5, 4, 5]


def test_the_tightest_members_positions_cap_the_ensemble():
    learned = tiny_model(0, positions="learned", max_positions=20)
    longer = tiny_model(2, positions="learned", max_positions=30)
    assert Ensemble([longer, tiny_model(1), learned]).max_positions == 20
    assert Ensemble([tiny_model(1), tiny_rnn(2)]).max_positions is None


def test_an_ensemble_is_in_evaluation_mode_when_its_members_are():
    assert not Ensemble([tiny_model(0), tiny_model(1)]).training
    training = Ensemble([tiny_model(0), tiny_model(1, dropout=0.5).train()])
    assert [m.training for m in training.members] == [False, True]  # left as they were
    with pytest.raises(ValueError, match="training mode"):
        beam_search(training, _sources(), **SPECIALS, beam_size=2)
    assert not any(m.training for m in training.eval().members)
    with pytest.raises(ValueError, match=r"pad with ids \[0, 1\]: not one vocabulary"):
        Ensemble([tiny_model(0), ScriptedSeq2Seq(pad=1)])
    with pytest.raises(ValueError, match="at least one model"):
        Ensemble([])


def test_same_shaped_members_attend_with_the_mean_of_their_weights():
    members = [tiny_model(0), tiny_model(1)]
    logits, maps = Ensemble(members).attention_maps(_sources(), _tgt_in())
    alone = [m.attention_maps(_sources(), _tgt_in())[1] for m in members]
    torch.testing.assert_close(logits, Ensemble(members)(_sources(), _tgt_in()))
    for part in ("decoder_cross", "encoder_self", "decoder_self"):
        for layer, ours in enumerate(getattr(maps, part)):
            pair = [getattr(a, part)[layer] for a in alone]
            torch.testing.assert_close(ours, (pair[0] + pair[1]) / 2)


LINES = ["the dog runs", "green grass", "", "children playing outside the dog"]


def test_two_saved_models_translate_as_their_ensemble_from_python_and_the_cli(tmp_path, capsys):
    vocab = toy_vocab(tmp_path)
    decode = DecodeConfig(beam_size=3, max_len_b=6)
    first = save_seeded_model(tmp_path / "a.pt", vocab, 1, decode=decode)
    # another shape
    second = save_seeded_model(tmp_path / "b.pt", vocab, 2, n_layers=1, h=4, d_k=4, d_v=4)
    translator = Translator.load([first, second])
    members = [Translator.load(first).model, Translator.load(second).model]
    expected = Translator(Ensemble(members), vocab, DecodeConfig(beam_size=3, max_len_b=6),
                          torch.device("cpu")).translate(LINES)  # fmt: skip
    assert translator.translate(LINES) == expected
    assert translator.decode == DecodeConfig(beam_size=3, max_len_b=6)  # the first model's
    assert expected != Translator.load(first).translate(LINES)  # the second counts
    assert transduce.translate([first, second], LINES) == [hyps[0][0] for hyps in expected]
    source = write_lines(tmp_path / "in.txt", LINES)
    main(["-q", "translate", "--model", str(first), "--model", str(second), "--input", str(source)])
    assert capsys.readouterr().out.splitlines() == [hyps[0][0] for hyps in expected]


def test_one_saved_model_is_loaded_as_itself_not_as_an_ensemble(tmp_path):
    model = Translator.load([save_seeded_model(tmp_path / "a.pt", toy_vocab(tmp_path), 1)]).model
    assert isinstance(model, Transformer)


def test_models_that_cannot_decode_together_are_refused_naming_them(tmp_path):
    vocab = toy_vocab(tmp_path)
    first = save_seeded_model(tmp_path / "a.pt", vocab, 1)
    other_vocab = save_seeded_model(tmp_path / "b.pt", toy_vocab(tmp_path / "v", vocab_size=50), 2)
    with pytest.raises(ValueError, match=r"b\.pt and .*a\.pt have different vocabularies"):
        load_ensemble([first, other_vocab])
    # as many pieces, other ones: the ids would mean other words
    lines = [" ".join(TOY_WORDS[i:] + TOY_WORDS[:i]).upper() for i in range(len(TOY_WORDS))]
    upper = train_joint(lines * 30, vocab.size, tmp_path / "upper")
    assert upper.size == vocab.size
    with pytest.raises(ValueError, match="different vocabularies"):
        load_ensemble([first, save_seeded_model(tmp_path / "u.pt", upper, 2)])
    parser = save_seeded_model(tmp_path / "p.pt", vocab, 3, task=TaskConfig(name="parse"))
    with pytest.raises(ValueError, match=r"p\.pt was trained for .*parse.*one task"):
        Translator.load([first, parser])
    lowercased = save_seeded_model(
        tmp_path / "l.pt", vocab, 4, task=TaskConfig(tokenize="none", lowercase=True)
    )
    with pytest.raises(ValueError, match=r"l\.pt was trained for .*lowercase=True"):
        Translator.load([first, lowercased])  # scored and post-processed otherwise
    with pytest.raises(ValueError, match="--checkpoint names one file, but 2 models"):
        Translator.load([first, first], checkpoint=first)
    with pytest.raises(ValueError, match="no model given"):
        Translator.load([])


def test_alignments_come_from_a_same_shaped_ensemble_and_are_refused_otherwise(tmp_path):
    vocab = toy_vocab(tmp_path)
    first = save_seeded_model(tmp_path / "a.pt", vocab, 1)
    second = save_seeded_model(tmp_path / "b.pt", vocab, 2)
    aligned = translate_with_alignments(Translator.load([first, second]), LINES)
    assert [text for text, _ in aligned] == [
        hyps[0][0] for hyps in Translator.load([first, second]).translate(LINES)
    ]
    assert all(links for text, links in aligned if text)
    odd = save_seeded_model(tmp_path / "c.pt", vocab, 3, n_layers=1)
    with pytest.raises(ValueError, match="attend differently"):
        translate_with_alignments(Translator.load([first, odd]), LINES)
