"""Joint sentencepiece BPE: training, ids, and an exact encode/decode round trip (bpe.py)."""

from __future__ import annotations

import pickle
import random

import pytest

from transduce.data.bpe import Vocab, train_joint
from transduce.data.corpus import DataError

WORDS = ["a", "man", "woman", "dog", "runs", "over", "the", "green", "field", ".", ","]
WORDS += ["ein", "mann", "hund", "läuft", "über", "das", "grüne", "feld"]
# Moses escapes, characters NFKC would change, runs of spaces, an empty line (seen in training)
ODD_LINES = [
    "the dog &apos;s field .",
    "ﬁeld ｶﾀｶﾅ ①",
    "two  spaces and a trailing one ",
    "",
    "über , grüne",
]


def tokenized_lines(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> Vocab:
    folder = tmp_path_factory.mktemp("bpe")
    return train_joint(tokenized_lines(300) + ODD_LINES, 60, folder / "joint")


def test_special_ids_are_fixed(vocab):
    assert (vocab.pad, vocab.unk, vocab.bos, vocab.eos) == (0, 1, 2, 3)
    assert 4 < vocab.size <= 60 and len(vocab) == vocab.size


def test_round_trip_on_tokenized_text(vocab):
    lines = tokenized_lines(50, seed=1) + ODD_LINES
    ids = vocab.encode(lines)
    assert all(4 <= i < vocab.size for seq in ids for i in seq)  # no unk, no specials
    assert vocab.decode(ids) == lines


def test_encode_adds_no_bos_eos_and_decode_drops_them(vocab):
    [ids] = vocab.encode(["a man runs"])
    assert vocab.bos not in ids and vocab.eos not in ids
    noisy = [[vocab.bos, *ids, vocab.eos, vocab.pad, vocab.pad], [vocab.pad, *ids]]
    assert vocab.decode(noisy) == ["a man runs", "a man runs"]


def test_decode_shows_an_unknown_piece_instead_of_dropping_it(vocab):
    # only pad, bos and eos vanish: a word the vocabulary cannot spell stays visible in the output
    [ids] = vocab.encode(["a ж man"])  # a character never seen in training
    assert vocab.unk in ids
    assert vocab.decode([ids]) == ["a  ⁇  man"]  # sentencepiece's unknown mark


def test_training_is_deterministic_and_loadable(tmp_path, vocab):
    again = train_joint(tokenized_lines(300) + ODD_LINES, 60, tmp_path / "other")
    assert again.pieces(range(again.size)) == vocab.pieces(range(vocab.size))
    loaded = Vocab.load(tmp_path / "other.model")
    assert loaded.encode(["ein hund"]) == vocab.encode(["ein hund"])
    assert Vocab.from_bytes(vocab.serialized).encode(["das feld"]) == vocab.encode(["das feld"])


def test_bpe_dropout_gives_the_same_text_in_smaller_pieces(vocab):
    lines = tokenized_lines(100, seed=2) + ODD_LINES
    plain = vocab.encode(lines)
    dropped = vocab.encode_with_dropout(lines, 0.3, seed=5)
    assert vocab.decode(dropped) == lines  # the text, exactly, whatever its segmentation
    assert all(4 <= i < vocab.size for seq in dropped for i in seq)  # pieces of the vocabulary
    assert sum(map(len, dropped)) > sum(map(len, plain))  # merges were skipped
    assert vocab.encode_with_dropout(lines, 0.3, seed=5) == dropped  # a seed gives one answer
    assert vocab.encode_with_dropout(lines, 0.3, seed=6) != dropped


def test_bpe_dropout_at_a_rate_near_one_skips_nearly_every_merge(vocab):
    """The rate is the chance each merge is skipped: at 0.99 a word is nearly its characters."""
    lines = tokenized_lines(100, seed=3)
    dropped = vocab.encode_with_dropout(lines, 0.99, seed=5)
    characters = sum(len(word) + 1 for line in lines for word in line.split())  # "▁" each
    assert sum(map(len, dropped)) > 0.95 * characters


def test_pieces_and_their_ids_map_both_ways_and_a_vocabulary_pickles_as_itself(vocab):
    [ids] = vocab.encode(["the green dog runs over the field ."])
    assert vocab.piece_ids(vocab.pieces(ids)) == ids
    copy = pickle.loads(pickle.dumps(vocab))  # as the server hands it to its decoding process
    lines = tokenized_lines(20, seed=4)
    assert copy.encode(lines) == vocab.encode(lines) and copy.size == vocab.size


def test_bpe_dropout_keeps_whole_tokens_whole(tmp_path):
    trees = ["(S (NP the dog )NP (VP runs )VP )S", "(S (NP a man )NP )S"] * 20
    parse = train_joint(trees, 40, tmp_path / "parse", whole_tokens=["(S", ")S", "(NP", ")NP"])
    for seed in range(5):
        [ids] = parse.encode_with_dropout(trees[:1], 0.5, seed=seed)
        for token in ("(S", ")S", "(NP", ")NP"):
            assert "\u2581" + token in parse.pieces(ids)


def test_a_tiny_corpus_gives_a_smaller_vocabulary(tmp_path):
    small = train_joint(["a b", "b a"], 1000, tmp_path / "tiny")
    assert small.size < 1000
    assert small.decode(small.encode(["a b a"])) == ["a b a"]


def test_load_of_a_non_model_names_the_file(tmp_path):
    path = tmp_path / "junk.model"
    path.write_bytes(b"not a model")
    with pytest.raises(DataError, match=r"junk\.model"):
        Vocab.load(path)


def test_whole_tokens_given_as_one_string_is_refused_not_split_into_characters(tmp_path):
    """A str is a sequence too: "<sep>" would make "<", "s", "e", "p", ">" whole tokens each."""
    with pytest.raises(TypeError, match=r"must be a list of tokens, e\.g\. \['<sep>'\]"):
        train_joint(tokenized_lines(50), 60, tmp_path / "joint", whole_tokens="<sep>")
