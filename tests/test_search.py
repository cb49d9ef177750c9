import itertools
import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import transduce.decoding.search as search
from transduce.decoding.search import beam_search, greedy_search, length_penalty, top_k

from .conftest import BOS, EOS, PAD, tiny_model
from .fakes import ScriptedSeq2Seq

SPECIALS = dict(bos=BOS, eos=EOS, pad=PAD)


def _sources():
    torch.manual_seed(1)
    src = torch.randint(4, 12, (5, 6))
    src[:, -1] = EOS
    src[1, 3:] = torch.tensor([EOS, PAD, PAD])
    src[3, 2:] = torch.tensor([EOS, PAD, PAD, PAD])
    return src


def test_beam_1_equals_greedy():
    for seed in range(3):
        model = tiny_model(seed)
        src = _sources()
        greedy = greedy_search(model, src, **SPECIALS, max_len_b=8)
        beam = beam_search(model, src, **SPECIALS, beam_size=1, alpha=0.0, max_len_b=8)
        assert [h[0].tokens for h in beam] == greedy


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_batch_decodes_as_each_sentence_alone(search):
    # sentences finish at different steps and leave the batch: the cache must follow
    model, src = tiny_model(2), _sources()

    def decode(s):
        if search == "greedy":
            return greedy_search(model, s, **SPECIALS, max_len_b=6)
        return [h[0].tokens for h in beam_search(model, s, **SPECIALS, beam_size=3, max_len_b=6)]

    alone = [decode(src[i : i + 1, : int((src[i] != PAD).sum())])[0] for i in range(len(src))]
    assert decode(src) == alone


def _teacher_forced_log_prob(model, src, tokens):
    tgt = torch.tensor([[BOS, *tokens, EOS]])
    log_probs = torch.log_softmax(model(src, tgt[:, :-1]), dim=-1)[0]
    return log_probs.gather(1, tgt[0, 1:, None]).sum().item()


def test_a_wide_beam_finds_the_exhaustive_best():
    model = tiny_model(3, vocab_size=6)  # tokens 4, 5 and UNK can be generated, besides EOS
    src = torch.tensor([[4, 5, EOS]])
    limit = 4  # max_len_a = 0, max_len_b = 4: at most 3 tokens, then EOS
    alpha = 0.6
    candidates = [list(t) for n in range(limit) for t in itertools.product([1, 4, 5], repeat=n)]
    best = max(
        candidates,
        key=lambda t: _teacher_forced_log_prob(model, src, t) / length_penalty(len(t) + 1, alpha),
    )
    found = beam_search(
        model,
        src,
        **SPECIALS,
        beam_size=3**limit,
        alpha=alpha,
        max_len_a=0,
        max_len_b=limit,
        n_best=3**limit,
    )[0]
    assert found[0].tokens == best
    # every ended hypothesis is scored as teacher forcing scores it, and sorted best first
    for hyp in found:
        assert hyp.log_prob == pytest.approx(_teacher_forced_log_prob(model, src, hyp.tokens))
        assert hyp.score == pytest.approx(hyp.log_prob / length_penalty(len(hyp.tokens) + 1, alpha))
    assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)
    assert len(found) == len(candidates)  # exhaustive: every sequence ended once


@pytest.mark.parametrize("family", ["transformer", "scripted"])
def test_a_narrow_beam_scores_every_hypothesis_as_teacher_forcing_does(family):
    """Beam 2 over 9 candidate tokens per row: from the second step on the beam keeps 2 of 18
    extensions with as many rows as before, step after step. A search that stopped reordering
    the cache once the number of rows stopped changing would score the wrong prefixes."""
    model = tiny_model(4) if family == "transformer" else ScriptedSeq2Seq(seed=3)
    src = _sources()
    beams = beam_search(model, src, **SPECIALS, beam_size=2, alpha=0.6, max_len_b=8, n_best=2)
    lengths = []
    for i, hypotheses in enumerate(beams):
        alone = src[i : i + 1, : int((src[i] != PAD).sum())]
        for hyp in hypotheses:
            teacher_forced = _teacher_forced_log_prob(model, alone, hyp.tokens)
            assert hyp.log_prob == pytest.approx(teacher_forced, rel=1e-6)  # float32 sums
            assert hyp.score == pytest.approx(
                hyp.log_prob / length_penalty(len(hyp.tokens) + 1, 0.6)
            )
            lengths.append(len(hyp.tokens))
    assert max(lengths) >= 4  # several steps in the steady state, not only the widening


# --- a scripted model: the probabilities are a table, so results can be worked out by hand ---

A = 4
V = 5


@dataclass
class ScriptedCache:
    prefixes: torch.Tensor  # (N, t) tokens fed so far

    def reorder(self, index, group=None):
        self.prefixes = self.prefixes[index]


class ScriptedModel:
    """P(EOS) = 0.5, P(a) = 0.5 at the start; after 'a', P(EOS) = 0.8, P(a) = 0.2; and so on."""

    table: ClassVar[dict] = {(): {EOS: 0.5, A: 0.5}, (A,): {EOS: 0.8, A: 0.2}, (A, A): {EOS: 1.0}}

    def __init__(self):
        self.steps = 0

    def encode(self, src):
        return src

    def init_cache(self, encoded, group=1):
        return ScriptedCache(torch.empty(encoded.size(0) * group, 0, dtype=torch.long))

    def step(self, tokens, cache):
        self.steps += 1
        cache.prefixes = torch.cat([cache.prefixes, tokens], dim=1)
        logits = torch.full((tokens.size(0), V), float("-inf"))
        for row, prefix in enumerate(cache.prefixes.tolist()):
            for token, p in self.table.get(tuple(prefix[1:]), {EOS: 1.0}).items():
                logits[row, token] = math.log(p)
        return logits


def test_length_penalty_and_n_best_order_worked_by_hand():
    src = torch.tensor([[A, EOS]])
    # log P: [] = log .5 = -0.693; [a] = log .4 = -0.916; [a, a] = log .1 = -2.303
    plain = beam_search(ScriptedModel(), src, **SPECIALS, beam_size=3, alpha=0.0, n_best=3)[0]
    assert [h.tokens for h in plain] == [[], [A], [A, A]]
    assert [h.log_prob for h in plain] == pytest.approx(
        [math.log(0.5), math.log(0.4), math.log(0.1)]
    )
    # alpha 2: [a] scores -0.916 / (7/6)^2 = -0.673 and beats [] at -0.693 / 1
    penalised = beam_search(ScriptedModel(), src, **SPECIALS, beam_size=3, alpha=2.0, n_best=2)[0]
    assert [h.tokens for h in penalised] == [[A], []]
    assert penalised[0].score == pytest.approx(math.log(0.4) / (7 / 6) ** 2)


def test_an_ended_hypothesis_does_not_take_a_live_ones_place_in_the_beam():
    """Each step ranks 2k extensions: EOS among the k best ends a hypothesis and the k best
    others go on, so a beam of k keeps k live hypotheses. With only k ranked, [b] (third at the
    first step, behind [] and [a]) would drop out, and with it the best translation."""
    b = 1  # a second content token (UNK is one the search may write)

    class EndsAmongTheBest(ScriptedModel):
        table: ClassVar[dict] = {
            (): {EOS: 0.36, A: 0.34, b: 0.30},
            (A,): {EOS: 0.02, A: 0.98},
            (A, A): {EOS: 0.02, A: 0.98},
            (b,): {EOS: 1.0},
        }

    src = torch.tensor([[A, EOS]])  # at most |x| + 2 = 3 tokens, EOS included
    best = beam_search(
        EndsAmongTheBest(), src, **SPECIALS, beam_size=2, alpha=2.0, max_len_b=2, n_best=2
    )[0]
    # [b]: log .30 / (7/6)^2 = -0.885 beats [] at log .36 = -1.022; [a, ...] end below -2.8
    assert [h.tokens for h in best] == [[b], []]
    assert best[0].score == pytest.approx(math.log(0.30) / (7 / 6) ** 2)


def test_search_stops_early_when_every_beam_has_ended():
    model = ScriptedModel()
    beam_search(model, torch.tensor([[A, EOS]]), **SPECIALS, beam_size=2, max_len_b=50)
    assert model.steps == 2  # [] and [a] end by step 2, not after 52 steps


def test_hypotheses_never_exceed_the_length_limit():
    class NeverEnds(ScriptedModel):
        table: ClassVar[dict] = {}

        def step(self, tokens, cache):
            logits = super().step(tokens, cache)
            logits[:, [A, 1]], logits[:, EOS] = 0.0, -50.0  # EOS never ranks in the beam
            return logits

    src = torch.tensor([[A, A, EOS], [A, EOS, PAD]])
    beams = beam_search(NeverEnds(), src, **SPECIALS, beam_size=2, max_len_a=1.0, max_len_b=2)
    assert [len(h[0].tokens) for h in beams] == [3, 2]  # limit = |x| + 2, EOS included
    greedy = greedy_search(NeverEnds(), src, **SPECIALS, max_len_a=1.0, max_len_b=2)
    assert [len(t) for t in greedy] == [3, 2]


def test_the_first_step_runs_one_row_per_sentence_then_k():
    """BOS is every beam's only hypothesis at first: the model sees B rows, then B * k."""
    model, src = tiny_model(2), _sources()
    rows_per_step = []
    step = model.step

    def recording_step(tokens, cache):
        rows_per_step.append(tokens.size(0))
        return step(tokens, cache)

    model.step = recording_step
    beam_search(model, src, **SPECIALS, beam_size=3, max_len_b=6)
    assert rows_per_step[:2] == [5, 15]


def test_the_source_keys_are_held_once_per_sentence_not_once_per_hypothesis():
    """The k hypotheses of a sentence share its cross-attention keys and values: the cache keeps
    one row per sentence and `group` rows of hypotheses each, so beam search's memory for the
    source does not grow with k."""
    model, src = tiny_model(2), _sources()
    seen = []
    step = model.step

    def recording_step(tokens, cache):
        seen.append((tokens.size(0), cache.layers[0].cross_k.size(0), cache.group))
        return step(tokens, cache)

    model.step = recording_step
    beam_search(model, src, **SPECIALS, beam_size=3, max_len_b=6)
    assert seen[0] == (5, 5, 1)
    assert len(seen) > 3
    for rows, sentences, group in seen[1:]:
        assert (group, rows) == (3, 3 * sentences)


@pytest.mark.parametrize(("columns", "k", "chunk"), [(8000, 8, 64), (8003, 8, 64), (100, 3, 8)])
def test_top_k_by_chunks_equals_topk(columns, k, chunk):
    """The k best of a row by way of its chunks' maxima: the same values and columns as `topk`,
    also where masks leave a row few finite entries (constraints) or one (a forced end)."""
    torch.manual_seed(0)
    x = torch.randn(6, columns) * 3
    x[1, ::2] = float("-inf")  # half the row ruled out
    x[2, columns - 3 :] = 50.0 + torch.arange(3.0)  # the best in the short last chunk
    x[3] = float("-inf")
    x[3, 7] = 0.0  # only one entry left
    x[4, : columns // 2] = 40.0 + torch.rand(columns // 2)  # the best all in the first half
    values, columns_of = top_k(x, k, chunk)
    expected_values, expected_columns = x.topk(k, dim=1)
    assert torch.equal(values, expected_values)
    finite = expected_values > float("-inf")  # which -inf entry fills the rest is arbitrary
    assert torch.equal(columns_of[finite], expected_columns[finite])
    assert torch.equal(x.gather(1, columns_of), values)


def test_search_by_chunked_top_k_is_unchanged(monkeypatch):
    """The search's own vocabularies here are narrower than a chunk; chunks of 3 tokens make it
    take the chunked path (greedy's argmax too), and every hypothesis comes out the same."""
    model, src = tiny_model(4, vocab_size=40), _sources()
    beams = beam_search(model, src, **SPECIALS, beam_size=4, n_best=4, max_len_b=8)
    greedy = greedy_search(model, src, **SPECIALS, max_len_b=8)
    taken = []

    def chunked(x, k):
        taken.append(x.size(1) // 3 > k)
        return top_k(x, k, chunk=3)

    monkeypatch.setattr(search, "top_k", chunked)
    found = beam_search(model, src, **SPECIALS, beam_size=4, n_best=4, max_len_b=8)
    assert taken and all(taken)
    assert [[h.tokens for h in s] for s in found] == [[h.tokens for h in s] for s in beams]
    assert [[h.score for h in s] for s in found] == [[h.score for h in s] for s in beams]
    taken.clear()
    assert greedy_search(model, src, **SPECIALS, max_len_b=8) == greedy
    assert taken and all(taken)


def test_a_sentence_at_its_length_limit_leaves_the_batch():
    """Sentence 0 (an empty source, max_len_b=1) may only end at the first step: one ended
    hypothesis, no live one. It leaves the batch then, so the second step runs only sentence 1's
    k rows, and both sentences still get their hypotheses."""
    model = tiny_model()
    src = torch.tensor([[EOS, PAD, PAD, PAD, PAD], [5, 6, 7, 8, EOS]])
    rows, step = [], model.step

    def counting_step(tokens, cache):
        rows.append(tokens.size(0))
        return step(tokens, cache)

    model.step = counting_step
    found = beam_search(model, src, bos=BOS, eos=EOS, pad=PAD, beam_size=4, max_len_b=1)
    assert found[0][0].tokens == [] and len(found[1]) == 1
    assert rows[0] == 2  # the first step: one row per sentence
    assert rows[1] == 4, rows  # then sentence 1's beam alone
