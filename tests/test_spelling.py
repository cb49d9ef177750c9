"""Terms followed by their characters (`decoding/spelling.py`'s `Spelling`): in running text of
a script without spaces BPE segments a word by its neighbours, so a term is held by any pieces
that spell it, and the search finds the best output so spelled."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from transduce.decoding.forced import score_ids
from transduce.decoding.search import beam_search, length_penalty
from transduce.decoding.spelling import spelling
from transduce.decoding.terms import Terms, contains

from .conftest import EOS, SPECIALS, BarePieces, SpecialIds, tiny_model

CPU = torch.device("cpu")


def _brute_progress(text: str, written: str) -> int:
    """The characters of `text` the end of `written` matches, all of them once it holds it."""
    if text in written:
        return len(text)
    return max(q for q in range(len(text)) if q == 0 or written.endswith(text[:q]))


def _progress(spelled, tokens) -> int:
    """Through the tables, token after token, as the search follows a term: met stays met."""
    column = {key: r for r, key in enumerate(spelled.keys)}
    progress = 0
    for token in tokens:
        if progress < len(spelled.text):
            progress = spelled.steps[progress][column[token]] if token in column else 0
    return min(progress, len(spelled.text))


def test_progress_is_the_longest_start_of_the_term_that_ends_the_text():
    """Over pieces of up to three characters of a three-letter alphabet (many repeats, "aab"
    after "aaa"), the tables against their definition, token after token, and `held` is
    "the term is in the text" whatever pieces spell it."""
    rng = random.Random(0)
    alphabet = "abc"
    pieces = sorted({"".join(p) for n in (1, 2, 3) for p in itertools.product(alphabet, repeat=n)})
    vocab = BarePieces(pieces)
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
        spelled = spelling(vocab, text, False)
        tokens = [rng.randrange(4, vocab.size) for _ in range(rng.randint(0, 6))]
        for end in range(len(tokens) + 1):
            written = vocab.text(tokens[:end])
            expected = _brute_progress(text, written)
            assert _progress(spelled, tokens[:end]) == expected, (text, tokens[:end])
        assert spelled.held(tokens) == (text in vocab.text(tokens)), (text, tokens)
        # Whole (its last letter ends a word), in text all letters: met only where a piece ends.
        ends = set(itertools.accumulate(len(vocab.all[t]) for t in tokens))
        written = vocab.text(tokens)
        at_an_end = any(
            written.startswith(text, end - len(text)) for end in ends if end >= len(text)
        )
        assert spelling(vocab, text, True).held(tokens) == at_an_end, (text, tokens)


def test_a_whole_term_glued_onto_inside_a_piece_or_by_the_next_is_not_held():
    """ "犬a" ends in a letter of a spaced script: "犬ab" is no term "犬a", neither in one piece
    nor as "犬a" + "b"; "犬a" + "。" and "犬a。" are."""
    vocab = BarePieces(["犬a", "b", "。", "犬ab", "犬a。", "犬"])
    ids = {piece: i for i, piece in enumerate(vocab.all)}
    spelled = spelling(vocab, "犬a", True)
    glued = {ids["b"]}
    cases = [(["犬ab"], False), (["犬a", "b"], False), (["犬a", "。"], True), (["犬a。"], True),
             (["犬a"], True), (["犬", "犬a。", "b"], True)]  # fmt: skip
    for pieces, held in cases:
        assert spelled.held([ids[p] for p in pieces], glued) == held, pieces


def test_a_wide_beam_finds_the_exhaustive_best_output_spelling_the_term():
    """Pieces that spell "犬小屋" three ways ("犬" "小屋", "犬小" "屋", "犬" "小" "屋") and outputs
    of at most four: every output whose text holds it ends in the n best once, ahead of the
    others, with no term missing, scored as teacher forcing scores it; the best is the
    exhaustive best, whichever spelling it takes. Forced as one spelling, the term misses
    outputs."""
    vocab = BarePieces(["犬", "小", "屋", "犬小", "小屋", "は"])
    model, source = tiny_model(5, vocab_size=vocab.size), [4, 5, 9]
    writable = [1, *range(4, vocab.size)]  # <unk> too: the search may write it
    outputs = [list(t) for n in range(5) for t in itertools.product(writable, repeat=n)]
    holding = [t for t in outputs if "犬小屋" in vocab.text(t)]
    scored = score_ids(model, SpecialIds(), [(source, t) for t in outputs], CPU)
    teacher = {tuple(t): s.log_prob for t, s in zip(outputs, scored, strict=True)}

    def score(tokens):
        return teacher[tuple(tokens)] / length_penalty(len(tokens) + 1, 0.6)

    terms = Terms(((4, 8),), (False,), None, (spelling(vocab, "犬小屋", False),))
    src, wide = torch.tensor([[*source, EOS]]), dict(beam_size=3000, n_best=3000, alpha=0.6)
    found = beam_search(model, src, **SPECIALS, **wide, max_len_a=0, max_len_b=5, terms=[terms])[0]
    met = [h for h in found if "犬小屋" in vocab.text(h.tokens)]
    assert sorted(h.tokens for h in met) == sorted(holding)
    assert found[: len(met)] == met and all(h.missing == 0 for h in met)
    assert all(h.missing == 1 for h in found[len(met) :])
    assert found[0].tokens == max(holding, key=score)
    for hypothesis in found[:50]:
        assert hypothesis.log_prob == pytest.approx(teacher[tuple(hypothesis.tokens)])
    forced = beam_search(model, src, **SPECIALS, **wide, max_len_a=0, max_len_b=5,
                         terms=[[[4, 8]]])[0]  # fmt: skip
    assert len([h for h in forced if contains(h.tokens, [4, 8])]) < len(met)
    assert vocab.pieces(found[0].tokens) == ["犬小", "屋"]  # this model's best: not [4, 8]
    assert forced[0].tokens != found[0].tokens


def test_a_term_of_running_japanese_is_followed_by_its_characters_in_any_pieces(tmp_path):
    """BPE trained on running Japanese merges words with their neighbours: "公園で" in a
    sentence comes in pieces of its own neighbours' ("園で遊" ...). `parse_terms` follows the
    term by its characters there: every sentence holding them holds the term, however it is
    segmented, and no other does; it counts a piece a character at most. A spaced word,
    pre-tokenized text and a term of more than MAX_SPELLED characters keep its own tokens."""
    from transduce.config import TaskConfig
    from transduce.data.bpe import train_joint
    from transduce.decoding.terms import parse_terms

    rng = random.Random(1)
    words = ["私", "は", "犬", "が", "好き", "です", "猫", "と", "公園", "で", "遊ぶ", "園"]
    words.append(" dog ")
    lines = ["".join(rng.choice(words) for _ in range(rng.randint(3, 8))) for _ in range(400)]
    vocab = train_joint(lines, 60, tmp_path / "ja")
    terms = parse_terms(vocab, [["公園で", "dog"]])[0]
    assert terms.spellings[0].text == "公園で" and terms.spellings[1] is None
    assert terms.tokens == 3 + len(terms.phrases[1])
    otherwise = 0  # sentences holding it in pieces other than the term's glued encoding
    for line, ids in zip(lines, vocab.encode(lines), strict=True):
        assert terms.spellings[0].held(ids) == ("公園で" in line), (line, vocab.pieces(ids))
        otherwise += "公園で" in line and not contains(ids, terms.phrases[0])
    assert otherwise > 10
    tokenized = TaskConfig(tokenize="none", lowercase=True)
    assert parse_terms(vocab, [["公園で"]], tokenized)[0].spellings == (None,)
    longest, longer = "公園で" * 10 + "私は", "公園で" * 11  # 32 and 33 characters
    spelled = [s is not None for s in parse_terms(vocab, [[longest, longer]])[0].spellings]
    assert spelled == [True, False]


@pytest.mark.parametrize("beam", [1, 2])
def test_a_narrow_beam_still_places_a_term_the_model_would_not_write(beam):
    """Each step offers, for a term not yet met, the likeliest piece that takes it further: with
    one or two hypotheses and the shortest length limit that fits the term, the best output
    holds it, however unlikely the model finds it."""
    vocab = BarePieces(["犬", "小", "屋", "犬小", "小屋", "は"])
    for seed, text in itertools.product(range(3), ["小屋は", "屋犬", "は犬小"]):
        model = tiny_model(seed, vocab_size=vocab.size)
        terms = Terms(((4,),), (False,), None, (spelling(vocab, text, False),))
        src = torch.tensor([[4, 5, 9, EOS]])
        found = beam_search(model, src, **SPECIALS, beam_size=beam, max_len_a=0, max_len_b=1,
                            terms=[terms])[0][0]  # fmt: skip
        assert text in vocab.text(found.tokens) and found.missing == 0, (seed, text)


def _every_output(vocab: BarePieces, terms: Terms, seed: int, pattern: str):
    """A beam that keeps everything over outputs of at most three pieces: its n best, those of
    them holding the terms by the search's own count, and every output whose text `pattern`
    finds."""
    import re

    model = tiny_model(seed, vocab_size=vocab.size)
    writable = [1, *range(4, vocab.size)]
    outputs = [list(t) for n in range(4) for t in itertools.product(writable, repeat=n)]
    holding = [t for t in outputs if re.search(pattern, vocab.text(t))]
    src = torch.tensor([[4, 5, EOS]])
    found = beam_search(model, src, **SPECIALS, beam_size=400, n_best=400, max_len_a=0,
                        max_len_b=4, terms=[terms])[0]  # fmt: skip
    return found, [h for h in found if h.missing == 0], holding


def test_a_whole_term_met_inside_a_piece_stays_met_whatever_follows():
    """ "犬a" ends in a Latin letter: "犬a" + "b" is no term (the search rules "b" out there), but
    "犬a。" + "b" holds it, met inside a piece: every output holding it is found, the latter
    too, and none other counts as holding it."""

    vocab = BarePieces(["犬a。", "b", "犬", "a", "。"])
    glue = torch.tensor([p in ("a", "b") for p in vocab.all])
    terms = Terms(((6, 7),), (True,), glue, (spelling(vocab, "犬a", True),))
    found, met, holding = _every_output(vocab, terms, 2, "犬a(?![ab])")
    assert sorted(h.tokens for h in met) == sorted(holding) and found[: len(met)] == met
    assert [4, 5] in holding  # "犬a。" then "b"


def test_an_avoided_phrase_is_ruled_out_in_any_pieces_that_would_spell_it():
    """Over pieces of up to three characters of "abc", two avoided phrases followed by their
    characters: after any output holding neither, the tokens ruled out are exactly those whose
    text would complete one ("b" after "...a" for "ab", "cab" after anything); a row left with
    nothing keeps its tokens."""
    from transduce.decoding.avoid import AvoidConstraint

    rng = random.Random(2)
    pieces = sorted({"".join(p) for n in (1, 2, 3) for p in itertools.product("abc", repeat=n)})
    vocab = BarePieces(pieces)
    for _ in range(60):
        texts = ["".join(rng.choice("abc") for _ in range(rng.randint(2, 4))) for _ in range(2)]
        spellings = tuple(spelling(vocab, text, False) for text in texts)
        avoided = Terms(((4,), (5,)), (False, False), None, spellings)
        state, written = AvoidConstraint(avoided, 1, EOS, CPU), []
        for _ in range(5):
            log_probs = torch.zeros(1, vocab.size)
            state.restrict(log_probs, torch.tensor([9]))
            text = vocab.text(written)
            completes = [any(t in text + vocab.all[v] for t in texts) for v in range(vocab.size)]
            assert (log_probs[0] == float("-inf")).tolist() == completes, (texts, text)
            allowed = [v for v in range(4, vocab.size) if not completes[v]]
            if not allowed:
                break
            written.append(rng.choice(allowed))
            state.advance(torch.tensor([written[-1]]))
    cornered = torch.full((1, vocab.size), float("-inf"))
    cornered[0, vocab.all.index(texts[0])] = -1.0  # the one token left spells an avoided phrase
    state.restrict(cornered, torch.tensor([9]))
    assert cornered[0, vocab.all.index(texts[0])] == -1.0
    # Given way to inside a piece ("犬猫犬" in "犬猫犬猫"), the phrase goes on from the piece's end:
    # "犬" would complete it again.
    japanese = BarePieces(["犬猫犬猫", "犬", "猫"])
    state = AvoidConstraint(Terms(((5,),), (False,), None, (spelling(japanese, "犬猫犬", False),)),
                            1, EOS, CPU)  # fmt: skip
    state.advance(torch.tensor([4]))
    log_probs = torch.zeros(1, japanese.size)
    state.restrict(log_probs, torch.tensor([9]))
    assert log_probs[0, 5] == float("-inf") and log_probs[0, 6] == 0


def test_a_wide_beam_finds_the_exhaustive_best_output_without_the_spelled_phrase():
    """ "小屋" avoided by its characters: the n best of a beam that keeps everything are exactly
    the outputs whose text lacks it ("小" + "屋", "小屋" and "犬" + "小屋" alike), the best the
    exhaustive best; as the pieces of its encoding alone (before), "小" + "屋" got through."""
    vocab = BarePieces(["犬", "小", "屋", "犬小", "小屋", "は"])
    model, source = tiny_model(5, vocab_size=vocab.size), [4, 5, 9]
    writable = [1, *range(4, vocab.size)]
    outputs = [list(t) for n in range(4) for t in itertools.product(writable, repeat=n)]
    allowed = [t for t in outputs if "小屋" not in vocab.text(t)]
    scored = score_ids(model, SpecialIds(), [(source, t) for t in allowed], CPU)
    teacher = {tuple(t): s.log_prob for t, s in zip(allowed, scored, strict=True)}
    avoided = Terms(((8,),), (False,), None, (spelling(vocab, "小屋", False),))
    src = torch.tensor([[*source, EOS]])
    found = beam_search(model, src, **SPECIALS, beam_size=400, n_best=400, alpha=0.6,
                        max_len_a=0, max_len_b=4, avoid=avoided)[0]  # fmt: skip
    assert sorted(h.tokens for h in found) == sorted(allowed)
    best = max(allowed, key=lambda t: teacher[tuple(t)] / length_penalty(len(t) + 1, 0.6))
    assert found[0].tokens == best
    as_tokens = beam_search(model, src, **SPECIALS, beam_size=400, n_best=400, alpha=0.6,
                            max_len_a=0, max_len_b=4, avoid=[[8]])[0]  # fmt: skip
    assert any("小屋" in vocab.text(h.tokens) for h in as_tokens)


def test_a_term_holding_an_avoided_phrase_by_its_characters_is_refused(tmp_path):
    """Running Japanese: the term "犬小屋" holds the avoided "小屋", in whatever pieces."""
    from transduce.data.bpe import train_joint
    from transduce.decoding.avoid import check_terms, parse_avoided
    from transduce.decoding.terms import parse_terms

    rng = random.Random(3)
    words = ["私", "は", "犬", "が", "小屋", "犬小屋", "です", "公園", "で"]
    lines = ["".join(rng.choice(words) for _ in range(rng.randint(3, 8))) for _ in range(300)]
    vocab = train_joint(lines, 40, tmp_path / "ja")
    avoided = parse_avoided(vocab, ["小屋", "公園"])
    assert [s.text for s in avoided.spellings] == ["小屋", "公園"]
    with pytest.raises(ValueError, match=r"犬小屋.*holds the avoided '小屋'"):
        check_terms(avoided, parse_terms(vocab, [["私"], ["犬小屋"]]), vocab)
    check_terms(avoided, parse_terms(vocab, [["犬が"]]), vocab)


def test_a_spelled_term_with_a_space_and_a_latin_end_is_held_as_whole_words(tmp_path):
    """ "公園で dog" starts in Japanese (followed by its characters, its space a word start) and
    ends in a Latin word: held in "公園で dog", not in "公園で dogo" (one piece, "▁dogo") nor
    before a piece that glues on; every line of the corpus is judged as the pattern judges it."""
    import re

    from transduce.data.bpe import train_joint
    from transduce.decoding.terms import parse_terms

    rng = random.Random(1)
    words = [
        "私",
        "は",
        "犬",
        "が",
        "好き",
        "です",
        "猫",
        "と",
        "公園",
        "で",
        "遊ぶ",
        "園",
        "公園で",
    ]
    words += [" dog ", " dogo "]
    lines = ["".join(rng.choice(words) for _ in range(rng.randint(3, 8))) for _ in range(400)]
    vocab = train_joint(lines, 60, tmp_path / "ja")
    assert "\u2581dogo" in vocab.pieces(list(range(vocab.size)))
    terms = parse_terms(vocab, [["公園で dog"]])[0]
    assert terms.whole == (True,) and terms.spellings[0].text == "公園で\u2581dog"
    glued = set(terms.glue.nonzero().flatten().tolist())
    held = [terms.spellings[0].held(ids, glued) for ids in vocab.encode(lines)]
    assert held == [
        bool(re.search("公園で dog(?![a-z])", " ".join(line.split()))) for line in lines
    ]
    assert any(held) and any("公園で dogo" in " ".join(line.split()) for line in lines)
    ids = vocab.encode(["公園で dog"])[0]
    assert not terms.spellings[0].held([*ids, *vocab.piece_ids(["o"])], glued)
    # A term starting with a Latin word, "dog 公園": followed by its characters, not after a
    # letter ("dogdog 公園"), held after a Japanese character ("犬dog 公園").
    latin = parse_terms(vocab, [["dog 公園"]])[0].spellings[0]
    assert latin.text == "dog\u2581公園"
    assert latin.held(vocab.encode(["犬dog 公園"])[0]) and latin.held(vocab.encode(["dog 公園"])[0])
    assert not latin.held(vocab.encode(["dogdog 公園"])[0])
    # A model whose outputs are running Japanese (scored on characters) spells every term, a
    # Latin word too: "dog" inside "犬dog公園", not in "dogo"; a model of spaced text does not.
    from transduce.config import TaskConfig

    running = parse_terms(vocab, [["dog"]], TaskConfig(tokenize="char"))[0].spellings[0]
    assert parse_terms(vocab, [["dog"]])[0].spellings == (None,)
    assert running.held(vocab.encode(["犬dog公園"])[0], glued)
    assert not running.held(vocab.encode(["犬dogo公園"])[0], glued)
    assert not running.held(vocab.encode(["犬dogdog公園"])[0], glued)
    # Avoided, its characters are ruled out a letter after them or not: "▁dogo" too.
    from transduce.decoding.avoid import AvoidConstraint, parse_avoided

    state = AvoidConstraint(parse_avoided(vocab, ["公園で dog"]), 1, EOS, CPU)
    for token in vocab.encode(["公園で"])[0]:
        state.advance(torch.tensor([token]))
    log_probs = torch.zeros(1, vocab.size)
    state.restrict(log_probs, torch.tensor([9]))
    ruled = {vocab.pieces([i])[0] for i in (log_probs[0] == float("-inf")).nonzero().flatten()}
    assert {"\u2581dog", "\u2581dogo"} <= ruled and "\u2581" not in ruled


def test_a_glue_piece_that_meets_a_whole_term_again_may_be_glued_onto_again():
    """ "犬b" | "a犬b" | "a": the glue piece undoes the term and meets it again at its own end,
    where the next glue piece undoes it again: the search and `missing` agree it is not held."""
    from transduce.decoding.terms import TermConstraint

    vocab = BarePieces(["犬b", "a犬b", "a"])
    glue = torch.tensor([piece[:1] == "a" for piece in vocab.all])
    terms = Terms(((4,),), (True,), glue, (spelling(vocab, "犬b", True),))
    state, tokens = TermConstraint([terms], EOS, CPU), [4, 5, 6]
    for token in tokens:
        state.advance(torch.tensor([token]))
    assert state.progress[0, 0] < state.lengths[0, 0] and state.missing(0, tokens) == 1


def test_a_term_starting_a_spaced_word_does_not_start_after_a_letter_of_one():
    """Over pieces of "a", "b" (letters of a spaced script) and "犬": a term starting with a
    letter ("a犬", "AI技術") starts only where no letter comes before it, inside a piece or
    after one ("ba犬" holds no "a犬"; "犬a犬" does), through the tables as `held` judges it."""
    import re

    rng = random.Random(4)
    alphabet = "ab犬"
    pieces = sorted({"".join(p) for n in (1, 2, 3) for p in itertools.product(alphabet, repeat=n)})
    vocab = BarePieces(pieces)
    for _ in range(300):
        text = rng.choice("ab") + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 3)))
        spelled = spelling(vocab, text, False, True)
        tokens = [rng.randrange(4, vocab.size) for _ in range(rng.randint(0, 6))]
        written = vocab.text(tokens)
        bounded = re.search("(?<![ab])" + re.escape(text), written) is not None
        assert spelled.held(tokens) == bounded, (text, vocab.pieces(tokens))
    unbounded = spelling(vocab, "a犬", False)
    ba_dog = [vocab.all.index("ba"), vocab.all.index("犬")]
    assert unbounded.held(ba_dog) and not spelling(vocab, "a犬", False, True).held(ba_dog)


def test_a_wide_beam_finds_every_output_holding_a_term_that_starts_a_spaced_word():
    """ "a犬" after "b" ("b" | "a犬", or "ba" | "犬") is no term; at the start, after "犬" or inside
    "犬a犬" it is: the n best of a beam that keeps everything are exactly the outputs holding it
    so, first, with no term missing."""

    vocab = BarePieces(["a犬", "ba", "a", "犬", "b"])
    word_ends = torch.tensor([piece[-1:] in ("a", "b") for piece in vocab.all])
    terms = Terms(((4,),), (False,), None, (spelling(vocab, "a犬", False, True),), word_ends)
    found, met, holding = _every_output(vocab, terms, 3, "(?<![ab])a犬")
    assert sorted(h.tokens for h in met) == sorted(holding) and found[: len(met)] == met
    assert [8, 4] not in holding and [5, 7] not in holding  # "b" "a犬", "ba" "犬"
    assert [4] in holding and [7, 4] in holding  # "a犬" at the start, after "犬"
    from transduce.decoding.terms import TermConstraint

    for tokens, met in [([8, 4], False), ([5, 7], False), ([7, 4], True), ([8, 7, 4], True)]:
        state = TermConstraint([terms], EOS, CPU)  # the search's own judgement, token by token
        for token in tokens:
            state.advance(torch.tensor([token]))
        assert bool(state.progress[0, 0] >= state.lengths[0, 0]) == met, vocab.pieces(tokens)
