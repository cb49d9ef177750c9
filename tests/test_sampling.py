"""Sampling (`decoding/sampling.py`, `translate --sampling`): tokens drawn from the model's own
distribution, tempered and cut as asked, reproducible from a seed, scored as `score` scores them."""

from __future__ import annotations

import math

import pytest
import torch

from transduce.cli import main
from transduce.config import DecodeConfig
from transduce.decoding.forced import score_ids
from transduce.decoding.sampling import Sampling, _drawing_probs, sample
from transduce.decoding.search import greedy_search

from .conftest import (
    BOS,
    EOS,
    PAD,
    SPECIALS,
    SpecialIds,
    save_toy_model,
    tiny_model,
    toy_translator,
    write_lines,
)


def _first_step_probs(model, source: list[int]) -> torch.Tensor:
    """The model's distribution over the first target token, padding and BOS ruled out (as
    search rules them out), renormalised: what a first token is drawn from."""
    logits = model(torch.tensor([[*source, EOS]]), torch.tensor([[BOS]]))[0, 0].float()
    logits[[PAD, BOS]] = -torch.inf
    return logits.softmax(-1)


def test_first_tokens_come_in_the_models_proportions():
    """20,000 samples of one sentence: each first token's share is its probability within four
    standard errors (a sampler that drew the argmax, ignored the temperature or the
    renormalisation, or reused one random number would be far outside)."""
    model, source, n = tiny_model(seed=7, dtype=torch.float32), [4, 5, 6], 20_000
    expected = _first_step_probs(model, source)
    found = sample(model, torch.tensor([[*source, EOS]]), Sampling(samples=n, seed=3),
                   **SPECIALS, max_len_b=1)[0]  # fmt: skip
    firsts = torch.tensor([h.tokens[0] if h.tokens else EOS for h in found])
    shares = torch.bincount(firsts, minlength=expected.numel()).float() / n
    tolerance = 4 * (expected * (1 - expected) / n).sqrt() + 1e-4
    assert (shares - expected).abs().le(tolerance).all(), (shares, expected)
    assert shares[[PAD, BOS]].sum() == 0


def test_temperature_top_k_and_top_p_shape_the_drawing_distribution():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    log_probs = probs.log()

    def drawn(**settings):
        return _drawing_probs(log_probs, Sampling(**settings))[0]

    torch.testing.assert_close(drawn(), probs[0])
    sharper = probs[0] ** 2 / (probs[0] ** 2).sum()  # p^(1/T), T = 1/2
    torch.testing.assert_close(drawn(temperature=0.5), sharper)
    torch.testing.assert_close(drawn(top_k=2), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    # the nucleus: the fewest likeliest tokens whose mass reaches p
    torch.testing.assert_close(drawn(top_p=0.7), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    torch.testing.assert_close(drawn(top_p=0.8), torch.tensor([0.625, 0.375, 0.0, 0.0]))
    assert drawn(top_p=0.81)[2] > 0 and drawn(top_p=0.81)[3] == 0
    assert drawn(top_p=0.01).tolist() == [1.0, 0.0, 0.0, 0.0]  # the likeliest always stays
    shuffled = _drawing_probs(probs[:, [2, 0, 3, 1]].log(), Sampling(top_p=0.7))[0]
    torch.testing.assert_close(shuffled, torch.tensor([0.0, 0.625, 0.0, 0.375]))


def test_a_samples_log_prob_is_what_forced_decoding_gives_it():
    """The model's own log P of the drawn tokens and EOS, neither tempered nor cut: the number
    `transduce score` gives the pair with its own source (in a batch of two, the samples go to
    the right sentence); samples come best score first, within the length limit."""
    model = tiny_model(seed=8)
    src = torch.tensor([[4, 7, 9, 5, EOS], [6, 6, 11, EOS, PAD]])
    settings = Sampling(samples=8, top_k=4, temperature=1.5, seed=2)
    found = sample(model, src, settings, **SPECIALS, alpha=0.6, max_len_b=6)
    for source, samples in zip(([4, 7, 9, 5], [6, 6, 11]), found, strict=True):
        pairs = [(source, h.tokens) for h in samples]
        scores = score_ids(model, SpecialIds(), pairs, torch.device("cpu"))
        for hypothesis, score in zip(samples, scores, strict=True):
            assert hypothesis.log_prob == pytest.approx(score.log_prob, abs=1e-5)
            penalty = ((5 + len(hypothesis.tokens) + 1) / 6) ** 0.6
            assert hypothesis.score == pytest.approx(hypothesis.log_prob / penalty)
        assert [h.score for h in samples] == sorted((h.score for h in samples), reverse=True)
        assert all(len(h.tokens) + 1 <= len(source) + 6 for h in samples)


def test_drawing_only_the_likeliest_token_is_greedy_search():
    model = tiny_model(seed=9)
    torch.manual_seed(1)
    src = torch.randint(4, 12, (5, 6))
    src[:, -1] = EOS
    src[2, 3:] = torch.tensor([EOS, PAD, PAD])
    greedy = greedy_search(model, src, **SPECIALS, max_len_b=7)
    for settings in (Sampling(top_k=1, seed=5), Sampling(top_p=1e-6, seed=6)):
        found = sample(model, src, settings, **SPECIALS, max_len_b=7)
        assert [h[0].tokens for h in found] == greedy


def test_one_seed_draws_the_same_samples_and_batches_draw_fresh_ones(tmp_path):
    """Reproducible: the same lines and seed give the same samples, another seed others. And
    one random stream runs through a file's batches: the same sentence in six batches of one
    is not drawn six times alike (a generator seeded anew for each batch would)."""
    translator = toy_translator(tmp_path)
    lines = ["the dog runs across the green grass"] * 6
    one_a_batch = DecodeConfig(batch_size=1, max_len_b=8)

    def drawn(seed: int) -> list[str]:
        found = translator.translate(lines, one_a_batch, Sampling(seed=seed))
        return [hyps[0][0] for hyps in found]

    assert drawn(4) == drawn(4)
    assert drawn(4) != drawn(5)
    assert len(set(drawn(4))) > 1


def test_sampling_settings_out_of_range_are_refused_named():
    for bad in ({"samples": 0}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5},
                {"temperature": 0.0}, {"temperature": math.inf}):  # fmt: skip
        with pytest.raises(ValueError, match=f"sampling: {next(iter(bad))} must"):
            Sampling(**bad)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sampling")
    return save_toy_model(folder), write_lines(folder / "in.txt", ["the dog runs", "green grass"])


def test_the_cli_draws_n_samples_a_line_as_an_n_best_list(saved, tmp_path):
    model, source = saved
    out = tmp_path / "out.txt"
    main(["translate", "--model", str(model), "--input", str(source), "--output", str(out),
          "--sampling", "--n-best", "5", "--top-k", "20", "--seed", "3"])  # fmt: skip
    rows = [line.split(" ||| ") for line in out.read_text().splitlines()]
    assert [int(r[0]) for r in rows] == [0] * 5 + [1] * 5
    scores = [float(r[2]) for r in rows]
    assert scores[:5] == sorted(scores[:5], reverse=True)
    main(["translate", "--model", str(model), "--input", str(source), "--output", str(out),
          "--sampling", "--seed", "3"])  # fmt: skip
    assert len(out.read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--top-k", "5"], "--top-k: for sampling, which is off: add --sampling"),
        (["--seed", "2", "--temperature", "0.5"], "--temperature, --seed: for sampling"),
        (["--sampling", "--beam", "3"], "--beam is for beam search; with --sampling, --n-best"),
        (["--sampling", "--alignments"], "--alignments come with beam search's best"),
        (["--sampling", "--top-p", "2"], "top_p must be in"),
    ],
)
def test_contradicting_flags_are_refused_named(saved, flags, message):
    model, source = saved
    with pytest.raises(SystemExit, match=message):
        main(["translate", "--model", str(model), "--input", str(source), *flags])
