"""Constrained search for parsing: at each step only tokens that can continue a tree over
exactly the input's words; with it, every output of any model is a tree needing no repair."""

import pytest
import torch

from transduce.config import DecodeConfig
from transduce.data.batching import collate
from transduce.data.linearize import restore
from transduce.decoding.constraints import TreeConstraint
from transduce.decoding.search import greedy_search
from transduce.decoding.translate import decode_ids

from .conftest import small_reverse_data, tiny_model
from .test_parsing import prepared, treebank  # noqa: F401 (fixtures)

NEG = float("-inf")


def _allowed(constraint: TreeConstraint, vocab, room: int = 50) -> set[str]:
    log_probs = torch.zeros(len(constraint.sentence), vocab.size)
    constraint.restrict(log_probs, torch.full((len(constraint.sentence),), room))
    return {vocab.pieces([i])[0].removeprefix("\u2581") for i in
            (log_probs[0] > NEG).nonzero().flatten().tolist()}  # fmt: skip


def _take(constraint: TreeConstraint, vocab, token: str) -> None:
    constraint.advance(torch.tensor(vocab.piece_ids([f"\u2581{token}"])))


def test_each_step_allows_only_what_continues_a_tree_over_the_words(prepared):  # noqa: F811
    vocab = prepared.vocab
    openers = {p.removeprefix("\u2581") for p in vocab.pieces(list(range(vocab.size)))
               if p.removeprefix("\u2581").startswith("(")}  # fmt: skip
    two_words = TreeConstraint(vocab, vocab.encode(["the cat"]), torch.device("cpu"))
    assert _allowed(two_words, vocab) == openers  # a tree starts with its root
    _take(two_words, vocab, "(S")
    assert _allowed(two_words, vocab) == openers | {"XX"}  # no empty bracket, no early close
    _take(two_words, vocab, "(NP")
    _take(two_words, vocab, "XX")
    assert _allowed(two_words, vocab) == openers | {"XX", ")NP"}  # the innermost closer only
    _take(two_words, vocab, "XX")
    assert _allowed(two_words, vocab) == {")NP"}  # every word placed: close what is open
    _take(two_words, vocab, ")NP")
    assert _allowed(two_words, vocab) == {")S"}
    _take(two_words, vocab, ")S")
    assert _allowed(two_words, vocab) == {"</s>"}  # nothing after the root
    # Too little room left for another bracket and its closers: words only.
    short = TreeConstraint(vocab, vocab.encode(["the cat"]), torch.device("cpu"))
    _take(short, vocab, "(S")
    assert _allowed(short, vocab, room=4) == {"XX"}  # XX XX )S </s> fill it
    assert _allowed(short, vocab, room=5) == openers | {"XX"}


def test_rows_follow_their_hypotheses_and_a_row_no_tree_fits_is_left_to_the_search(
    prepared,  # noqa: F811
):
    vocab = prepared.vocab
    everything = {p.removeprefix("\u2581") for p in vocab.pieces(list(range(vocab.size)))}
    rows = TreeConstraint(vocab, vocab.encode(["a dog saw", "the cat"]), torch.device("cpu"))

    def take(*tokens: str) -> None:
        rows.advance(torch.tensor(vocab.piece_ids([f"\u2581{t}" for t in tokens])))

    take("(S", "(S")
    take("(S", "(S")
    take("XX", "(NP")
    rows.reorder(torch.tensor([1, 0]))  # "the cat" (S (S (NP comes first now, its state too
    assert ")NP" not in _allowed(rows, vocab)  # just opened: no empty bracket
    take("XX", "XX")
    assert {")NP", "XX"} <= _allowed(rows, vocab)  # 3 deep, one of its two words placed
    take("XX", "XX")
    assert _allowed(rows, vocab) == {")NP"}  # both placed: close the innermost
    # Two words need (S XX XX )S: with room for three tokens no tree fits, nothing is masked.
    fresh = TreeConstraint(vocab, vocab.encode(["the cat"]), torch.device("cpu"))
    assert _allowed(fresh, vocab, room=3) == everything


@pytest.mark.parametrize("beam", [1, 4])
def test_any_model_searched_so_writes_trees_that_need_no_repair(prepared, beam):  # noqa: F811
    vocab, sentences = prepared.vocab, ["the cat sat", "a dog saw the mat on a cat", "the"]
    sources = vocab.encode(sentences)
    for seed in range(3):  # untrained models: left alone they write anything
        model = tiny_model(seed, dtype=torch.float32, vocab_size=vocab.size)
        decode = DecodeConfig(beam_size=beam, alpha=0.3, max_len_b=30, constrained=True)
        found = decode_ids(model, vocab, sources, decode, torch.device("cpu"))
        for sentence, hypotheses in zip(sentences, found, strict=True):
            tokens = [p.removeprefix("\u2581") for p in vocab.pieces(hypotheses[0].tokens)]
            _, repaired = restore(tokens, sentence.split(), tags=False)
            assert not repaired, tokens
            assert tokens.count("XX") == len(sentence.split())
        free = decode_ids(model, vocab, sources, DecodeConfig(beam_size=beam, max_len_b=30),
                          torch.device("cpu"))  # fmt: skip
        pieces = [[p.removeprefix("\u2581") for p in vocab.pieces(h[0].tokens)] for h in free]
        pairs = zip(pieces, sentences, strict=True)
        assert any(restore(t, s.split(), tags=False)[1] for t, s in pairs)  # free: malformed


def test_greedy_search_so_writes_trees_as_its_sentences_finish_apart(prepared):  # noqa: F811
    # the constraint's rows follow greedy search's too, as finished sentences leave the batch
    vocab, sentences = prepared.vocab, ["the cat sat", "a dog saw the mat on a cat", "the"]
    sources = vocab.encode(sentences)
    src = collate([(s, []) for s in sources], vocab.pad, vocab.bos, vocab.eos).src
    for seed in range(2):
        model = tiny_model(seed, dtype=torch.float32, vocab_size=vocab.size)
        constraint = TreeConstraint(vocab, sources, torch.device("cpu"))
        found = greedy_search(
            model, src, bos=vocab.bos, eos=vocab.eos, pad=vocab.pad, max_len_b=30,
            constraint=constraint,
        )  # fmt: skip
        for sentence, ids in zip(sentences, found, strict=True):
            tokens = [p.removeprefix("\u2581") for p in vocab.pieces(ids)]
            assert not restore(tokens, sentence.split(), tags=False)[1], tokens
            assert tokens.count("XX") == len(sentence.split())


def test_a_vocabulary_without_placeholders_cannot_be_constrained(tmp_path):
    translation = small_reverse_data(tmp_path)
    with pytest.raises(ValueError, match="XX"):
        TreeConstraint(translation.vocab, [[5, 6]], torch.device("cpu"))
