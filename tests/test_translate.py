import pytest
import torch

import transduce
import transduce.decoding.translate as translate_module
from transduce.config import DecodeConfig
from transduce.decoding.translate import Translator, decode_ids

from .conftest import save_toy_model, tiny_model


class FakeVocab:
    pad, unk, bos, eos = 0, 1, 2, 3


def _searches(monkeypatch, reading) -> list:
    """`reading(src, kwargs)` of each call translating makes to beam search."""
    seen, search = [], translate_module.beam_search

    def recording_search(model, src, **kwargs):
        seen.append(reading(src, kwargs))
        return search(model, src, **kwargs)

    monkeypatch.setattr(translate_module, "beam_search", recording_search)
    return seen


def test_learned_positions_cap_the_output_length_instead_of_crashing():
    model = tiny_model(positions="learned", max_positions=6)
    sources = [[4, 5, 6, 7]]  # within the table; + 50 would not be
    hyps = decode_ids(model, FakeVocab(), sources, DecodeConfig(beam_size=2), torch.device("cpu"))
    assert len(hyps[0][0].tokens) + 1 <= 6


def test_results_come_back_in_input_order_whatever_the_batching():
    model = tiny_model(1)
    sources = [[4, 5, 6, 7, 8], [9], [10, 11], [4, 4, 4, 4, 4, 4, 4]]
    one_by_one = [
        decode_ids(model, FakeVocab(), [s], DecodeConfig(), torch.device("cpu"))[0][0].tokens
        for s in sources
    ]
    batched = decode_ids(
        model, FakeVocab(), sources, DecodeConfig(batch_size=3), torch.device("cpu")
    )
    assert [h[0].tokens for h in batched] == one_by_one


def test_a_saved_runs_decoding_settings_reach_the_search(tmp_path, monkeypatch):
    """What a preset or `--set decode.*` chose (`tiny`'s alpha 1.0, say) is what translating the
    run searches with, unless the call names its own."""
    settings = ("beam_size", "alpha", "max_len_a", "max_len_b")
    seen = _searches(monkeypatch, lambda src, kwargs: tuple(kwargs[k] for k in settings))
    decode = DecodeConfig(beam_size=3, alpha=1.0, max_len_a=1.5, max_len_b=7)
    translator = transduce.load(save_toy_model(tmp_path, decode))
    translator.translate(["a b c"])
    translator.translate(["a b c"], DecodeConfig(beam_size=2))
    assert seen == [(3, 1.0, 1.5, 7), (2, 0.6, 1.0, 50)]


def test_the_search_gets_sentences_of_one_length_together_and_the_models_cap(monkeypatch):
    """Sources are sorted by length before they are cut into batches (little padding), and the
    search is told the longest output the model's positions allow (learned positions)."""
    seen = _searches(
        monkeypatch, lambda src, kwargs: ((src != FakeVocab.pad).sum(1).tolist(), kwargs["max_len"])
    )
    model = tiny_model(positions="learned", max_positions=12)
    sources = [[4] * 5, [5], [6] * 5, [7]]
    decode = DecodeConfig(batch_size=2, beam_size=2)
    decode_ids(model, FakeVocab(), sources, decode, torch.device("cpu"))
    assert seen == [([2, 2], 12), ([6, 6], 12)]  # EOS counted


def test_spaces_around_a_line_change_nothing(tmp_path):
    """Lines are stripped before they are encoded: a pasted line with spaces or a tab around it
    translates as the bare line does, and a line of spaces alone is an empty line."""
    translator = transduce.load(save_toy_model(tmp_path, DecodeConfig()))
    bare, padded = translator.translate(["a b c", "  \ta b c  "])
    assert padded == bare
    assert translator.translate(["   "]) == [[("", 0.0)]]


def test_a_line_longer_than_learned_positions_allow_is_refused_by_its_number():
    """With learned positions (a table of `max_positions`), a source of that many subwords with
    its EOS fits; one more is refused before any decoding, naming the line (counted from 1)."""

    class WordVocab(FakeVocab):
        def encode(self, lines):
            return [[4] * len(line.split()) for line in lines]

        def decode(self, rows):
            return ["w " * len(row) for row in rows]

    model = tiny_model(positions="learned", max_positions=6)
    translator = Translator(model, WordVocab(), DecodeConfig(beam_size=1), torch.device("cpu"))
    assert len(translator.translate(["a b c d e"])) == 1  # 5 subwords + EOS = 6
    with pytest.raises(ValueError, match=r"input line 2: 7 subwords exceed .*max_positions=6"):
        translator.translate(["a", "a b c d e f"])


def test_decoding_a_model_left_in_training_mode_uses_no_dropout():
    """`decode_ids` puts the model in eval mode itself: a model handed over in training mode
    (validation during a run) decodes as the same model in eval mode, not with dropout."""
    model = tiny_model(3, dropout=0.5)
    sources = [[4, 5, 6, 7], [8, 9]]
    decode, cpu = DecodeConfig(beam_size=2), torch.device("cpu")
    expected = decode_ids(model.eval(), FakeVocab(), sources, decode, cpu)
    for _ in range(3):
        got = decode_ids(model.train(), FakeVocab(), sources, decode, cpu)
        assert [h[0].tokens for h in got] == [h[0].tokens for h in expected]


def test_what_would_be_silently_wrong_from_python_is_refused_saying_what_to_pass(tmp_path):
    """A str where the list of sentences belongs was translated (and scored) character by
    character, a generator came back empty, a mistyped decoding setting or a dict where a
    DecodeConfig belongs failed deep inside: each refused, naming what to pass."""
    translator = transduce.load(save_toy_model(tmp_path, DecodeConfig(beam_size=2)))
    with pytest.raises(TypeError, match=r"not one str: for one sentence pass \['a b'\]"):
        transduce.translate(translator, "a b")
    with pytest.raises(TypeError, match=r"lines\[1\] is a NoneType, not a str"):
        translator.translate(["a", None])
    with pytest.raises(TypeError, match="not one str"):
        transduce.translate_with_alignments(translator, "a b")
    from_generator = transduce.translate(translator, (line for line in ["a b", "c"]))
    assert (
        from_generator == transduce.translate(translator, ["a b", "c"]) and len(from_generator) == 2
    )
    with pytest.raises(TypeError, match=r"unknown decoding settings \['beam'\]; DecodeConfig has"):
        transduce.translate(translator, ["a"], beam=8)
    with pytest.raises(TypeError, match="decode must be a DecodeConfig, not dict"):
        translator.translate(["a"], {"beam_size": 2})
    with pytest.raises(ValueError, match=r"decode\.max_len_a must be >= 0 and finite"):
        transduce.translate(translator, ["a"], max_len_a=float("inf"))
    with pytest.raises(TypeError, match="hypotheses must be a list of sentences, not one str"):
        transduce.score("a dog runs", "a dog runs")
    with pytest.raises(TypeError, match=r"references\[0\] is a NoneType"):
        transduce.chrf(["a dog"], [None])


def test_searching_with_a_model_in_training_mode_or_impossible_settings_is_refused():
    """greedy_search and beam_search called directly (not through `decode_ids`, which sets eval
    mode itself): a model left in training mode would decode with dropout, differently each
    call; a beam of 0 failed in a reshape, n_best over the beam came back short, a negative
    alpha ranked nonsense."""
    model, src = tiny_model(3, dropout=0.5), torch.tensor([[4, 5, 6, 3]])
    ids = {"bos": 2, "eos": 3, "pad": 0}
    for search in (transduce.greedy_search, transduce.beam_search):
        with pytest.raises(ValueError, match=r"training mode \(dropout on\): call model.eval"):
            search(model.train(), src, **ids)
    model.eval()
    impossible = [{"beam_size": 0}, {"beam_size": 2, "n_best": 3}, {"n_best": 0}]
    for bad in [*impossible, {"alpha": -1.0}, {"alpha": float("inf")}]:
        with pytest.raises(ValueError, match="beam_size must be an int >= 1, n_best in"):
            transduce.beam_search(model, src, **ids, **bad)
    assert transduce.beam_search(model, src, **ids, beam_size=2, n_best=2)[0][1].tokens is not None


def test_loading_for_int8_decoding_makes_a_translator_that_decodes_in_int8(tmp_path):
    # guards: `translate --int8` loading a float32 translator (int8 not handed on by load)
    from transduce.models.int8 import available

    path = save_toy_model(tmp_path)
    assert Translator.load(path, device="cpu").int8_weights is None
    if not available:
        with pytest.raises(ValueError, match="oneDNN"):
            Translator.load(path, device="cpu", int8=True)
        return
    assert Translator.load(path, device="cpu", int8=True).int8_weights == {}  # the int8 store
