"""Terms (`decoding/terms.py`, `translate --terms`): every output holds each of its line's
phrases, placed by the beam where the model likes it best, scored as forced decoding scores
the whole output."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from types import MappingProxyType

import pytest
import torch

from transduce.cli import main
from transduce.config import TaskConfig
from transduce.decoding.forced import score_ids
from transduce.decoding.sampling import Sampling
from transduce.decoding.search import beam_search, length_penalty
from transduce.decoding.terms import MAX_TERMS, TermConstraint, Terms, contains
from transduce.decoding.translate import Translator

from .conftest import (
    EOS,
    PAD,
    SENTENCES,
    SPECIALS,
    SpecialIds,
    padded_sources,
    save_toy_model,
    tiny_model,
    tiny_rnn,
    toy_translator,
    write_lines,
)

CPU = torch.device("cpu")


def _sources() -> tuple[torch.Tensor, list[list[list[int]]]]:
    """Four sentences of different lengths, padded, and terms each: two phrases, none, one of
    three tokens (a repeated token: progress that must not restart from nothing), one."""
    src = padded_sources(SENTENCES)
    return src, [[[7, 9], [10]], [], [[5, 5, 6]], [[11]]]


def _source_ids(src) -> list[list[int]]:
    return [[int(t) for t in row if t not in (PAD, EOS)] for row in src]


@pytest.mark.parametrize("family", ["transformer", "rnn"])
@pytest.mark.parametrize("beam", [1, 3])
def test_every_output_holds_its_phrases_and_scores_as_forced_decoding(family, beam):
    """The best of each sentence holds every phrase of its own, even with a length limit too
    short for them (raised to fit them), and so do the n best, but for those ended by the
    length limit, which come last; every log-probability is the model's of the whole output."""
    model = tiny_model(seed=3) if family == "transformer" else tiny_rnn(seed=3)
    src, terms = _sources()
    found = beam_search(model, src, **SPECIALS, beam_size=beam, n_best=beam, max_len_b=1,
                        terms=terms)  # fmt: skip
    for source, phrases, hyps in zip(_source_ids(src), terms, found, strict=True):
        limit = max(len(source) + 1, sum(map(len, phrases)) + 1)  # tokens, EOS included
        held = [all(contains(h.tokens, phrase) for phrase in phrases) for h in hyps]
        assert held[0] and held == sorted(held, reverse=True), (phrases, hyps)
        assert all(len(h.tokens) + 1 == limit for h, ok in zip(hyps, held, strict=True) if not ok)
        scores = score_ids(model, SpecialIds(), [(source, h.tokens) for h in hyps], CPU)
        assert [h.log_prob for h in hyps] == pytest.approx([s.log_prob for s in scores])


def test_a_wide_beam_finds_the_exhaustive_best_output_holding_the_phrase():
    """Over three writable tokens and outputs of at most four: every output that holds [5, 4]
    ends in the n best once, ahead of those that do not (ended only by the length limit, none
    shorter: no EOS before the phrase), scored as teacher forcing scores it, and the best is
    the exhaustive best."""
    model, source, phrase = tiny_model(5, vocab_size=6), [4, 5], [5, 4]
    src = torch.tensor([[*source, EOS]])
    outputs = [list(t) for n in range(5) for t in itertools.product([1, 4, 5], repeat=n)]
    holding = [t for t in outputs if contains(t, phrase)]
    scored = score_ids(model, SpecialIds(), [(source, t) for t in outputs], CPU)
    teacher = {tuple(t): s.log_prob for t, s in zip(outputs, scored, strict=True)}

    def score(tokens):
        return teacher[tuple(tokens)] / length_penalty(len(tokens) + 1, 0.6)

    found = beam_search(model, src, **SPECIALS, beam_size=300, n_best=300, alpha=0.6,
                        max_len_a=0, max_len_b=5, terms=[[phrase]])[0]  # fmt: skip
    met = [h for h in found if contains(h.tokens, phrase)]
    assert sorted(h.tokens for h in met) == sorted(holding)
    assert found[: len(met)] == met  # those holding it first
    assert len(found) > len(met)  # the others end too, at the limit: every output has an end
    assert all(len(h.tokens) == 4 for h in found[len(met) :])
    assert found[0].tokens == max(holding, key=score)
    for hypothesis in found:
        assert hypothesis.log_prob == pytest.approx(teacher[tuple(hypothesis.tokens)])
        assert hypothesis.score == pytest.approx(score(hypothesis.tokens))


def test_a_batch_decodes_as_each_sentence_alone_with_its_terms():
    """Sentences with two phrases, none, and others in one batch: rows leave it and are
    reordered; each sentence gets what it gets alone (one without terms: the plain beam)."""
    model = tiny_model(seed=4)
    src, terms = _sources()
    together = beam_search(model, src, **SPECIALS, beam_size=3, n_best=3, max_len_b=4,
                           terms=terms)  # fmt: skip
    for i, phrases in enumerate(terms):
        alone_src = src[i : i + 1, : int((src[i] != PAD).sum())]
        alone = beam_search(model, alone_src, **SPECIALS, beam_size=3, n_best=3, max_len_b=4,
                            terms=[phrases])[0]  # fmt: skip
        assert [h.tokens for h in together[i]] == [h.tokens for h in alone]
        assert [h.score for h in together[i]] == pytest.approx([h.score for h in alone])


def test_no_terms_and_empty_lists_change_nothing():
    model = tiny_model(seed=6)
    src, _ = _sources()
    plain = beam_search(model, src, **SPECIALS, beam_size=3, n_best=3, max_len_b=4)
    for terms in (None, [[] for _ in range(len(src))], [[[]] for _ in range(len(src))]):
        assert beam_search(model, src, **SPECIALS, beam_size=3, n_best=3, max_len_b=4,
                           terms=terms) == plain  # fmt: skip


@pytest.mark.parametrize("guide", ["terms", "avoid"])
def test_token_ids_past_the_vocabulary_or_below_zero_are_refused_by_name(guide):
    """Token-id phrases handed to the search directly (text is encoded within the vocabulary):
    an id past it is named at the first step, where a GPU would index with it and assert."""
    model = tiny_model(seed=6)
    src, _ = _sources()
    vocabulary = model.config.vocab_size
    for ids, message in [([vocabulary], f"token id {vocabulary} is past the model's {vocabulary}"),
                         ([-1], "must be >= 0")]:  # fmt: skip
        given = [[ids]] * len(src) if guide == "terms" else [ids]
        with pytest.raises(ValueError, match=message):
            beam_search(model, src, **SPECIALS, beam_size=2, max_len_b=3, **{guide: given})
    given = [[[vocabulary - 1]]] * len(src) if guide == "terms" else [[vocabulary - 1]]
    found = beam_search(model, src, **SPECIALS, beam_size=2, max_len_b=3, **{guide: given})
    held = [vocabulary - 1 in hyps[0].tokens for hyps in found]
    assert held == [guide == "terms"] * len(src)  # the last id is a token like any other


def test_the_beam_keeps_a_hypothesis_that_met_a_term_beside_likelier_ones():
    """Beam 2 and a term the model finds unlikely: the plain beam never writes it, the banks
    keep a hypothesis holding it, and the likeliest output holding it is what the widest beam
    (every candidate kept) finds, not merely the term pasted at the end."""
    model = tiny_model(seed=8)
    src, _ = _sources()
    src = src[:1, :5]
    plain = beam_search(model, src, **SPECIALS, beam_size=2, max_len_b=3)[0][0].tokens
    rare = min(range(4, 12), key=lambda t: sum(t == x for x in plain))
    found = beam_search(model, src, **SPECIALS, beam_size=2, max_len_b=3, terms=[[[rare]]])
    assert rare in found[0][0].tokens and rare not in plain


def _brute_progress(tokens: list[int], phrase: list[int]) -> int:
    """How much of `phrase` the end of `tokens` matches (all of it once it has occurred)."""
    for end in range(len(tokens) + 1):
        if contains(tokens[:end], phrase):
            return len(phrase)
    return max(q for q in range(len(phrase)) if q == 0 or tokens[len(tokens) - q :] == phrase[:q])


def test_progress_through_a_phrase_is_the_longest_start_of_it_that_ends_the_output():
    """After a mismatch a phrase's progress falls back to the longest start of it the output
    ends with ("a a b" after "a a a" is still at "a a"), never to nothing; met stays met."""
    rng = random.Random(0)
    for _ in range(200):
        phrases = [[rng.choice([4, 5, 6]) for _ in range(rng.randint(1, 4))] for _ in range(2)]
        state = TermConstraint([Terms(tuple(map(tuple, phrases)), (False, False))], EOS, CPU)
        tokens: list[int] = []
        for _ in range(10):
            tokens.append(rng.choice([4, 5, 6, 7]))
            state.advance(torch.tensor([tokens[-1]]))
            expected = [_brute_progress(tokens, phrase) for phrase in phrases]
            assert state.progress[0].tolist() == expected, (phrases, tokens)


def test_the_transition_table_is_the_longest_start_that_ends_the_text():
    """Knuth-Morris-Pratt's automaton against its definition, on phrases of up to 12 tokens
    over 3 (many repeats), padded to 14, from every progress, the whole phrase's included (an
    avoided phrase may come again): the table is quadratic to build, not quartic."""
    from transduce.decoding.phrases import _transitions

    rng = random.Random(1)
    for _ in range(100):
        phrase = [rng.choice([4, 5, 6]) for _ in range(rng.randint(1, 12))]
        table, n = _transitions(tuple(phrase), 14), len(phrase)
        for p in range(15):
            for j in range(14):
                if p > n or j >= n:
                    assert table[p][j] == 0
                    continue
                text = [*phrase[:p], phrase[j]]
                want = max(q for q in range(min(p + 1, n) + 1) if text[len(text) - q :] ==
                           phrase[:q])  # fmt: skip
                assert table[p][j] == want, (phrase, p, j)


def test_candidates_are_taken_a_bank_at_a_time_the_most_advanced_first():
    """Three rows of one sentence, one phrase [5, 6]: a candidate's bank is the phrase tokens
    it has met (0, 1 or 2); the order takes each bank's best, most advanced first, then each
    bank's second; repeats of a (row, token) and impossible candidates come last."""
    state = TermConstraint([Terms(((5, 6),), (False,))], EOS, CPU)
    state.reorder(torch.tensor([0, 0, 0]))
    state.advance(torch.tensor([5, 4, 4]))  # row 0 has begun the phrase
    scores = torch.tensor([[-1.0, -2.0, -3.0]])
    log_probs = torch.full((3, 8), -10.0)
    log_probs[:, 4] = -0.1  # each row's own best
    best = (torch.tensor([[-1.1, -2.1, -3.1, -1.1]]), torch.tensor([[0, 1, 2, 0]]),
            torch.tensor([[4, 4, 4, 4]]))  # fmt: skip
    ordered_scores, rows, tokens = state.allocate(scores, log_probs, best)
    taken = list(zip(rows[0].tolist(), tokens[0].tolist(), strict=True))
    # bank 2: (0, 6); bank 1: (1, 5), (2, 5) (each begins the phrase); bank 0: (0, 4), (1, 4),
    # (2, 4), by score. Each bank's best, 2 first, then each bank's second, then the third.
    assert taken[:6] == [(0, 6), (1, 5), (0, 4), (2, 5), (1, 4), (2, 4)]
    assert ordered_scores[0, :6].tolist() == pytest.approx([-11, -12, -1.1, -13, -2.1, -3.1])
    assert (ordered_scores[0, 6:] == float("-inf")).all()  # repeats last


def test_a_piece_glued_onto_a_whole_term_is_ruled_out_or_undoes_it():
    """Phrase [5] ends a word and 7 glues: after 5, 7 is ruled out while anything else may
    come; when nothing else may (a prefix spelling on), 7 comes and the phrase is no longer
    met (and EOS is ruled out again); a phrase that may be glued onto stays met."""
    glue = torch.zeros(10, dtype=torch.bool)
    glue[7] = True
    state = TermConstraint([Terms(((5,), (6,)), (True, False), glue)], EOS, CPU)
    state.advance(torch.tensor([5]))
    log_probs = torch.zeros(1, 10)
    state.restrict(log_probs, torch.tensor([5]))
    assert log_probs[0, 7] == float("-inf") and log_probs[0, 4] == 0
    only_glue = torch.full((1, 10), float("-inf"))
    only_glue[0, 7] = -1.0
    state.restrict(only_glue, torch.tensor([5]))
    assert only_glue[0, 7] == -1.0  # nothing else: left to the search
    state.advance(torch.tensor([7]))
    assert state.progress[0].tolist() == [0, 0]
    state.advance(torch.tensor([6]))
    state.advance(torch.tensor([7]))
    assert state.progress[0].tolist() == [0, 1]  # not whole: glued onto, still met
    assert state.missing(0, [5, 7, 6, 7]) == 1 and state.missing(0, [5, 6, 7]) == 0


def test_a_prefix_that_glues_onto_a_term_leaves_it_to_be_met_again(tmp_path):
    """ "dogs " forced, the term "dog": the forced "s" undoes the term, which comes again as a
    word of its own (before: no hypothesis at all, and an IndexError)."""
    translator = toy_translator(tmp_path)
    decode = replace(translator.decode, beam_size=3)
    text = translator.translate(["the dog runs"], decode, prefixes=["dogs "], terms=[["dog"]])
    assert text[0][0][0].startswith("dogs ") and "dog" in text[0][0][0].split()[1:]


# --- text: Translator, the command line ---


def test_a_term_in_a_script_without_spaces_is_held_as_running_text_has_it(tmp_path):
    """Japanese: "犬" alone encodes as a word's start ("▁犬"), but a sentence has it inside
    ("▁私 は 犬 が"): the term is the piece without the mark, and no piece after it is kept
    from gluing (the script has no word ends to keep); Indic vowel signs end spaced words."""
    from transduce.data.bpe import train_joint
    from transduce.decoding.terms import parse_terms
    from transduce.writing import spaced

    rng = random.Random(0)
    words = ["私", "は", "犬", "が", "好き", "です", "猫", "と", "公園", "で", "遊ぶ"]
    lines = ["".join(rng.choice(words) for _ in range(rng.randint(3, 8))) for _ in range(300)]
    vocab = train_joint(lines, 40, tmp_path / "ja")
    assert vocab.pieces(vocab.encode(["犬"])[0])[0].startswith("\u2581")
    terms = parse_terms(vocab, [["犬", "公園で"]])[0]
    assert [vocab.pieces(list(p)) for p in terms.phrases] == [["犬"], ["公園", "で"]]
    assert terms.whole == (False, False)
    # Every line begins with the term: encoded alone one piece, "▁東京都", none without the mark;
    # inside a sentence "東" "京都". The term is spelled as a sentence holds it.
    for head in ("これは", "東京都"):
        opened = train_joint([head + line for line in lines], 40, tmp_path / head)
        assert opened.pieces(opened.encode([head])[0]) == ["\u2581" + head]
        phrase = parse_terms(opened, [[head]])[0].phrases[0]
        for sentence in ("私は" + head + "です", "猫と" + head + "で遊ぶ", "犬が" + head):
            assert contains(opened.encode([sentence])[0], phrase), opened.pieces(list(phrase))
    assert spaced("\u093e") and spaced("a") and not spaced("犬") and not spaced(".")
    assert not any(spaced(c) for c in "々〇ｶﾒﾗかナ１Ｐｚ") and spaced("한")  # Korean has spaces


class _ContextVocab:
    """A vocabulary whose segmentation depends on what comes before, as BPE's may: "犬小屋"
    alone is "▁犬小" "屋", after a comma "犬" "小屋" (the pieces a sentence holds it in)."""

    pad, unk, bos, eos = 0, 1, 2, 3
    PIECES = (
        "<pad>",
        "<unk>",
        "<s>",
        "</s>",
        "\u2581",
        "、",
        "犬",
        "小屋",
        "犬小",
        "屋",
        "\u2581犬小",
    )
    size = len(PIECES)
    ENCODED = MappingProxyType(
        {"犬小屋": ("\u2581犬小", "屋"), "、犬小屋": ("\u2581", "、", "犬", "小屋")}
    )

    def encode(self, lines):
        return [self.piece_ids(self.ENCODED[line]) for line in lines]

    def piece_ids(self, pieces):
        return [self.PIECES.index(p) if p in self.PIECES else self.unk for p in pieces]

    def pieces(self, ids):
        return [self.PIECES[i] for i in ids]

    def decode(self, lines):
        return ["".join(self.pieces(ids)).replace("\u2581", " ").strip() for ids in lines]

    def lacking(self, chars):
        return []


def test_a_glued_term_takes_the_pieces_a_sentence_holds_it_in():
    """Not its lone encoding with the word start dropped ("犬小" "屋"): the pieces it has after
    a comma, as inside a sentence ("犬" "小屋")."""
    from transduce.decoding.terms import parse_terms

    vocab = _ContextVocab()
    phrase = parse_terms(vocab, [["犬小屋"]])[0].phrases[0]
    assert vocab.pieces(list(phrase)) == ["犬", "小屋"]


def test_in_tokenized_text_a_term_is_a_word_of_its_own_in_every_script(tmp_path):
    """A pre-tokenized Japanese corpus (small_parallel_enja: "私 は 犬 が") writes "犬" as a
    word's start, as it encodes alone: the term keeps the mark, ends a word, and a piece that
    would glue onto it ("犬" + "小屋") counts as gluing there, not in running text."""
    from transduce.config import TaskConfig
    from transduce.data.bpe import train_joint
    from transduce.decoding.terms import _gluing, parse_terms

    rng = random.Random(0)
    words = ["私", "は", "犬", "が", "好き", "です", "猫", "と", "公園", "で", "犬小屋", "子犬"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 8))) for _ in range(300)]
    vocab = train_joint(lines, 40, tmp_path / "ja")
    tokenized = TaskConfig(tokenize="none", lowercase=True)
    terms = parse_terms(vocab, [["犬", "公園 で"]], tokenized)[0]
    assert [list(p) for p in terms.phrases] == vocab.encode(["犬", "公園 で"])
    assert vocab.pieces(list(terms.phrases[0]))[0].startswith("\u2581")
    assert terms.whole == (True, True)
    cjk_inside = [i for i, piece in enumerate(vocab.pieces(list(range(vocab.size))))
                  if piece[:1] in "犬小屋猫公園"]  # fmt: skip
    assert cjk_inside and terms.glue[cjk_inside].all()
    assert not _gluing(vocab, False)[cjk_inside].any()
    assert parse_terms(vocab, [["犬"]])[0].whole == (False,)


def test_translations_hold_the_terms_as_whole_words(tmp_path):
    """The best of each line holds each of its terms, a word, never glued onto by a piece that
    would lengthen it ("dog" is not met by "dogs"), whatever the toy model would have written;
    of the n best, those holding every term come first (the others ended at the length limit)."""
    translator = toy_translator(tmp_path)
    lines = ["the dog runs", "green grass", "children playing outside", "a man"]
    terms = [["grass"], [], ["the dog", "green"], ["children"]]
    decode = replace(translator.decode, beam_size=4, n_best=4, max_len_b=8)
    found = translator.translate(lines, decode, terms=terms)

    def holds(text, phrase):
        words, n = text.split(), len(phrase.split())
        return any(words[i : i + n] == phrase.split() for i in range(len(words)))

    for phrases, outputs in zip(terms, found, strict=True):
        held = [all(holds(text, p) for p in phrases) for text, _ in outputs]
        assert held[0] and held == sorted(held, reverse=True), (phrases, outputs)
    assert found[1] == translator.translate(lines[1:2], decode)[0]
    assert translator.translate(["", "dog"], terms=[["grass"], []])[0] == [("", 0.0)]


def test_lines_with_terms_are_searched_with_the_wider_terms_beam_the_others_as_before(tmp_path):
    """`decode.terms_beam` 5, beam 2: a line with terms gets what beam 5 gives it, a line
    without what beam 2 gives it, in one call; terms_beam at or below the beam changes nothing."""
    translator = toy_translator(tmp_path)
    lines, terms = ["the dog runs", "green grass"], [["children", "green"], []]
    decode = replace(translator.decode, beam_size=2, terms_beam=5)
    found = translator.translate(lines, decode, terms=terms)
    wide = replace(decode, beam_size=5, terms_beam=0)
    assert found[0] == translator.translate(lines[:1], wide, terms=terms[:1])[0]
    assert found[1] == translator.translate(lines[1:], decode)[0]
    narrow = replace(decode, terms_beam=0)
    assert found[0] != translator.translate(lines[:1], narrow, terms=terms[:1])[0]


def test_bad_terms_are_refused_by_name(tmp_path):
    translator = toy_translator(tmp_path)
    with pytest.raises(ValueError, match="1 term lists for 2 lines"):
        translator.translate(["the dog", "grass"], terms=[["the"]])
    with pytest.raises(ValueError, match="a string for 1 lines"):
        translator.translate(["the dog"], terms="the")
    with pytest.raises(TypeError, match="terms of line 1: a list of phrases, not one string"):
        translator.translate(["the dog"], terms=["grass"])
    with pytest.raises(ValueError, match="term 'a ☃' of line 2: the model's vocabulary lacks"):
        translator.translate(["the dog", "grass"], terms=[[], ["a ☃"]])
    with pytest.raises(ValueError, match=f"line 1 has {MAX_TERMS + 1} terms: at most"):
        translator.translate(["the dog"], terms=[[f"dog{i}" for i in range(MAX_TERMS + 1)]])
    with pytest.raises(ValueError, match="terms need beam search"):
        translator.translate(["the dog"], sampling=Sampling(), terms=[["grass"]])
    parser = Translator(translator.model, translator.vocab, translator.decode, CPU,
                        TaskConfig(name="parse"))  # fmt: skip
    with pytest.raises(ValueError, match="terms are for translation, not for a parse model"):
        parser.translate(["the dog"], terms=[["(S"]])
    learned = tiny_model(vocab_size=translator.vocab.size, positions="learned", max_positions=8)
    short = Translator(learned, translator.vocab, translator.decode, CPU)
    with pytest.raises(ValueError, match=r"line 1: its prefix and terms may take .* past the "):
        short.translate(["dog"], prefixes=["the dog "], terms=[["green grass outside"]])


def test_a_prefix_and_terms_together(tmp_path):
    """Each output starts with its prefix and holds its terms (a term inside the prefix is
    met there)."""
    translator = toy_translator(tmp_path)
    lines = ["the dog runs", "green grass"]
    prefixes, terms = ["the gre", "dog "], [["children"], ["dog", "outside"]]
    found = translator.translate(lines, prefixes=prefixes, terms=terms)
    for prefix, phrases, outputs in zip(prefixes, terms, found, strict=True):
        text = outputs[0][0]
        assert text.startswith(prefix.rstrip()) and all(p in text.split() for p in phrases)


def test_the_channel_reranks_only_candidates_holding_the_terms(tmp_path, monkeypatch):
    """Re-ranked by a reverse model, a candidate that lacks a term (ended by the length limit)
    never wins over one that holds them all, whatever the channel's weight."""
    from transduce.decoding.channel import channel_rerank

    translator = toy_translator(tmp_path)
    reverse = Translator(tiny_model(seed=9, vocab_size=translator.vocab.size),
                         translator.vocab, translator.decode, CPU)  # fmt: skip
    lines = ["the dog runs", "green grass", "children playing"]
    terms = [["grass", "children"], ["outside"], ["dog", "playing"]]
    decode = replace(translator.decode, beam_size=4, max_len_b=2)
    found = translator.hypotheses(lines, replace(decode, n_best=4), terms=terms)
    assert any(h.missing for hyps in found for _, h in hyps)  # some lack a term
    for weight in (0.0, 1.0, 10.0):
        ranked = channel_rerank(translator, reverse, lines, weight, decode, terms=terms)
        for hyps, mine in zip(found, ranked, strict=True):
            best = min(h.missing for _, h in hyps)
            held = {text for text, h in hyps if h.missing == best}
            assert {text for text, _ in mine} == held
    pytest.importorskip("fastapi", reason="the serve extra")
    from transduce.serve.engine import Engine, TranslateWork

    # The server says what each candidate lacks: the first line's candidates made to lack one
    # more each (a line whose every candidate lacks a term; the toy always fits them).
    searched = translator.hypotheses
    monkeypatch.setattr(translator, "hypotheses", lambda *a, **kw: [
        [(text, replace(h, missing=h.missing + (i == 0))) for text, h in hyps]
        for i, hyps in enumerate(searched(*a, **kw))])  # fmt: skip
    work = TranslateWork(lines, replace(decode, n_best=4), False, terms=terms, channel_weight=1.0)
    answers = Engine(translator, "toy", reverse=reverse).translate([work])[0]
    lacking = [[o["missing_terms"] for o in outputs] for outputs in answers]
    least = [min(h.missing for _, h in hyps) + (i == 0) for i, hyps in enumerate(found)]
    assert lacking == [[n] * len(outputs) for n, outputs in zip(least, answers, strict=True)]
    assert lacking[0][0] == 1


def test_the_command_line_reads_a_lines_terms_tab_separated(tmp_path, monkeypatch):
    model = save_toy_model(tmp_path)
    asked = []
    real = Translator.translate
    monkeypatch.setattr(
        Translator,
        "translate",
        lambda self, lines, *a, **k: (
            asked.append((k.get("terms"), a[0].beam_size, a[0].terms_beam))
            or real(self, lines, *a, **k)
        ),
    )
    source = write_lines(tmp_path / "in.txt", ["the dog runs", "grass", "children playing"])
    terms = write_lines(tmp_path / "terms.txt", ["green\tthe dog", "", "outside\r"])
    out = tmp_path / "out.txt"
    base = ["translate", "--model", str(model), "--input", str(source), "--beam", "3"]
    main([*base, "--terms", str(terms), "--output", str(out)])
    assert asked == [([["green", "the dog"], [""], ["outside"]], 3, 3)]  # the CR dropped
    first, second, third = out.read_text(encoding="utf-8").splitlines()
    assert "green" in first.split() and "the dog" in first and "outside" in third.split()
    main([*base, "--output", str(out)])
    assert out.read_text(encoding="utf-8").splitlines()[1] == second  # '' is no term
    main([*base, "--terms", str(terms), "--n-best", "2", "--buffer-size", "1", "--output",
          str(out)])  # fmt: skip
    n_best = [line.split(" ||| ") for line in out.read_text(encoding="utf-8").splitlines()]
    assert [i for i, _, _ in n_best] == ["0", "0", "1", "1", "2", "2"]
    assert "outside" in n_best[4][1].split()  # line 2's best
    main([*base, "--terms", str(terms), "--alignments", "--output", str(out)])
    assert "outside" in out.read_text(encoding="utf-8").splitlines()[2].split(" ||| ")[0]
    main([*base[:-2], "--terms", str(terms), "--output", str(out)])
    assert asked[-1][1:] == (4, 8)  # no --beam: the run's own, terms_beam 8 for lines with terms
    write_lines(terms, ["dog", "grass"])
    with pytest.raises(SystemExit, match=r"--terms .* has 2 lines, the input 3"):
        main([*base, "--terms", str(terms)])
    with pytest.raises(SystemExit, match="need beam search"):
        main([*base[:-2], "--terms", str(terms), "--sampling"])


def test_a_token_past_every_key_moves_no_phrase():
    """A token is found among a phrase's keys by one number for (sentence, phrase, token): a
    token past every key (10 with keys 4 and 5) is no key of any phrase, not phrase [4]'s
    neighbour's."""
    state = TermConstraint([Terms(((5,), (4,)), (False, False))], EOS, CPU)
    state.advance(torch.tensor([10]))
    assert state.progress.tolist() == [[0, 0]]
    state.advance(torch.tensor([4]))
    assert state.progress.tolist() == [[0, 1]]
