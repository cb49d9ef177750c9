"""R-Drop (training/rdrop.py): the objective worked out independently, the two passes under
different masks, the same gradients as the ordinary loss where dropout is off, and the wiring
from `train.rdrop` to the update."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

import transduce.training.loss as loss_module
import transduce.training.rdrop as rdrop_module
import transduce.training.step as step_module
from transduce.config import ConfigError, TrainConfig, override
from transduce.data.batching import collate
from transduce.models.dropout import LateDropout
from transduce.presets import tiny
from transduce.training.checkpoint import load
from transduce.training.loop import Trainer
from transduce.training.loss import label_smoothed_loss
from transduce.training.rdrop import RDropUpdates, rdrop_loss, rdrop_sums
from transduce.training.step import train_step

from .conftest import BOS, EOS, LEARNER_MODEL, PAD, small_reverse_data, tiny_model, tiny_rnn

PAIRS = [([4, 5, 6], [7, 8]), ([9], [10, 11, 4, 5]), ([6, 6, 7, 8], [8])]


def test_the_objective_is_the_mean_smoothed_loss_and_half_alpha_times_the_symmetric_kl():
    generator = torch.Generator().manual_seed(0)
    first, second = (torch.randn(3, 5, 12, generator=generator, dtype=torch.float64) for _ in "ab")
    target = torch.randint(1, 12, (3, 5), generator=generator)
    target[1, 3:] = PAD
    sums = rdrop_sums(first, second, target, eps=0.1, pad=PAD, alpha=5.0)
    scored = target != PAD
    one, two = (label_smoothed_loss(x, target, 0.1, PAD) for x in (first, second))
    log_p1, log_p2 = F.log_softmax(first, -1)[scored], F.log_softmax(second, -1)[scored]
    kl_12 = F.kl_div(log_p2, log_p1, reduction="sum", log_target=True)  # KL(p1 || p2)
    kl_21 = F.kl_div(log_p1, log_p2, reduction="sum", log_target=True)
    expected = (one.loss + two.loss) / 2 + 5.0 / 2 * (kl_12 + kl_21) / 2
    torch.testing.assert_close(sums.loss, expected)
    torch.testing.assert_close(sums.nll, (one.nll + two.nll) / 2)
    assert sums.n_tokens == int(scored.sum()) == 13
    same = rdrop_sums(first, first, target, eps=0.1, pad=PAD, alpha=5.0)
    torch.testing.assert_close(same.loss, one.loss)  # one prediction twice: no KL


@pytest.mark.parametrize("chunk_logits", [1 << 22, 6 * 12])
def test_the_chunked_projection_gives_the_objective_and_gradients_of_the_whole_logits(
    monkeypatch, chunk_logits
):
    """The Transformer's path (states and the output weight, gradients found chunk by chunk,
    padding rows dropped) against autograd through `rdrop_sums` over whole logits; chunks of
    three rows make several and a ragged last one."""
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", chunk_logits)
    generator = torch.Generator().manual_seed(1)
    first, second = (torch.randn(14, 6, generator=generator) for _ in "ab")
    weight = torch.randn(12, 6, generator=generator)
    target = torch.randint(1, 12, (14,), generator=generator)
    target[[2, 9, 10]] = PAD
    leaves = [t.clone().requires_grad_() for t in (first, second, weight)]
    loss, nll = rdrop_module._ProjectedRDrop.apply(*leaves, target, 0.1, PAD, 5.0)
    (loss * 0.3).backward()
    reference = [t.clone().requires_grad_() for t in (first, second, weight)]
    h1, h2, w = reference
    sums = rdrop_sums(h1 @ w.T, h2 @ w.T, target, 0.1, PAD, 5.0)
    (sums.loss * 0.3).backward()
    torch.testing.assert_close(loss, sums.loss)
    torch.testing.assert_close(nll, sums.nll)
    for ours, theirs in zip(leaves, reference, strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad)
    assert first.grad is None and float(leaves[0].grad[[2, 9, 10]].abs().max()) == 0.0


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_the_two_passes_drop_different_units(family):
    """With dropout the passes differ, so the KL term is positive and the loss exceeds the mean
    of the two smoothed losses; alpha 0 leaves that mean."""
    make = tiny_model if family == "transformer" else tiny_rnn
    model = make(1, dropout=0.3).train()
    batch = collate(PAIRS, PAD, BOS, EOS)
    with torch.no_grad():
        torch.manual_seed(0)
        with_kl = rdrop_loss(model, batch, 0.1, PAD, alpha=5.0)
        torch.manual_seed(0)
        without = rdrop_loss(model, batch, 0.1, PAD, alpha=0.0)
    assert with_kl.loss.item() > without.loss.item() + 1e-3
    assert with_kl.nll.item() == pytest.approx(without.nll.item())


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_without_dropout_an_update_descends_as_the_ordinary_loss(family):
    """No dropout: both passes are one prediction, and train_step with R-Drop moves every
    parameter as the ordinary update does (the Transformer's ordinary loss goes through the
    chunked projection, R-Drop's through whole logits)."""
    make = (lambda: tiny_model(5)) if family == "transformer" else (lambda: tiny_rnn(5))
    batches = [collate(PAIRS[:2], PAD, BOS, EOS), collate(PAIRS[2:], PAD, BOS, EOS)]
    results, params = [], []
    for rdrop in (0.0, 5.0):
        model = make()
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        results.append(
            train_step(
                model, optimizer, batches, rate=0.5, label_smoothing=0.1, pad=PAD, rdrop=rdrop
            )
        )
        params.append([p.detach().clone() for p in model.parameters()])
    assert results[1].loss == pytest.approx(results[0].loss)
    assert results[1].nll == pytest.approx(results[0].nll)
    assert results[1].tgt_tokens == results[0].tgt_tokens  # the batch's tokens, not twice them
    for ours, ordinary in zip(params[1], params[0], strict=True):
        torch.testing.assert_close(ours, ordinary)
    fresh = list(make().parameters())
    assert any((p - q).abs().max() > 0 for p, q in zip(params[1], fresh, strict=True))  # moved


@pytest.mark.parametrize(
    ("changes", "rdrop_updates"),
    [
        ({"train.rdrop": 2.5}, [1, 2, 3, 4]),
        ({}, []),  # off by default, as the paper
        ({"train.rdrop": 2.5, "train.rdrop_after": 2}, [3, 4]),
        # late dropout's first updates have no dropout: R-Drop waits for it
        ({"train.rdrop": 2.5, "train.rdrop_after": 1, "train.late_dropout": 3}, [4]),
    ],
)
def test_the_run_hands_its_rdrop_to_the_updates_it_trains(
    tmp_path, monkeypatch, changes, rdrop_updates
):
    data = small_reverse_data(tmp_path)
    received = []
    real = step_module.rdrop_loss
    trainer = None

    def recording(network, batch, eps, pad, alpha):
        received.append((trainer.progress.step + 1, alpha))
        return real(network, batch, eps, pad, alpha)

    monkeypatch.setattr(step_module, "rdrop_loss", recording)
    settings = LEARNER_MODEL | {"model.dropout": 0.1, "train.max_steps": 4, "train.valid_every": 4}
    settings |= {"train.valid_bleu": False, "train.keep_last": 1, "train.average_last": 1}
    trainer = Trainer(override(tiny(), settings | changes), data, tmp_path / "run", False,
                      torch.device("cpu"))  # fmt: skip
    trainer.run()
    assert received == [(update, 2.5) for update in rdrop_updates]


def test_rdrop_begins_after_its_updates_and_late_dropouts_and_says_so_once(caplog):
    model = tiny_model(dtype=torch.float32, dropout=0.1)
    late = LateDropout(model, updates_without=4)
    schedule = RDropUpdates(TrainConfig(rdrop=5.0, rdrop_after=2, late_dropout=4), late)
    with caplog.at_level("INFO", logger="transduce.training.rdrop"):
        assert [schedule.alpha(u) for u in range(1, 8)] == [0.0] * 4 + [5.0] * 3
    assert [r.getMessage() for r in caplog.records] == [
        "update 5: R-Drop begins (train.late_dropout)"  # the setting that decided it
    ]
    caplog.clear()
    later = RDropUpdates(TrainConfig(rdrop=5.0, rdrop_after=6, late_dropout=4), late)
    with caplog.at_level("INFO", logger="transduce.training.rdrop"):
        assert [later.alpha(u) for u in range(6, 9)] == [0.0, 5.0, 5.0]
    assert [r.getMessage() for r in caplog.records] == [
        "update 7: R-Drop begins (train.rdrop_after)"
    ]
    plain = RDropUpdates(TrainConfig(rdrop=5.0), LateDropout(model, updates_without=0))
    assert [plain.alpha(u) for u in (1, 2)] == [5.0, 5.0]
    with pytest.raises(ConfigError, match=r"train\.rdrop_after needs train\.rdrop > 0"):
        TrainConfig(rdrop_after=1)  # a start for nothing


def test_rdrop_on_a_model_without_dropout_is_refused_and_a_resumed_one_trains_ordinarily(caplog):
    model = tiny_model(dtype=torch.float32, dropout=0.0)
    none = LateDropout(model, updates_without=0)
    with pytest.raises(ConfigError, match=r"train\.rdrop needs dropout, and the model has none"):
        RDropUpdates(TrainConfig(rdrop=5.0), none)
    RDropUpdates(TrainConfig(rdrop=0.0), none)  # off: fine
    # a run started when this was allowed: its settings cannot change on resume, so it goes on
    resumed = RDropUpdates(TrainConfig(rdrop=5.0), none, resumed=True)
    assert [resumed.alpha(u) for u in (1, 2)] == [0.0, 0.0]
    assert "training on with the ordinary loss" in caplog.text


@pytest.mark.parametrize("bad", [-1.0, float("inf")])
def test_a_negative_or_infinite_rdrop_is_refused(bad):
    with pytest.raises(ConfigError, match=r"train\.rdrop must be >= 0 and finite"):
        TrainConfig(rdrop=bad)
    with pytest.raises(ConfigError, match=r"train\.rdrop_after must be >= 0"):
        TrainConfig(rdrop_after=-1)


def test_on_the_bfloat16_route_both_passes_project_in_bfloat16_within_its_rounding(monkeypatch):
    """Inside `bf16.products` (training on a CPU with bfloat16 in hardware) the chunks take
    `bf16.Projection`, once per update, and the sums and gradients stay within bfloat16's rounding
    of float32's."""
    from transduce.models import bf16

    made = []

    class Projection(bf16.Projection):
        def __init__(self, weight):
            made.append(weight)
            super().__init__(weight)

    monkeypatch.setattr(bf16, "Projection", Projection)
    generator = torch.Generator().manual_seed(2)
    first, second = (torch.randn(60, 32, generator=generator) for _ in "ab")
    weight = 0.2 * torch.randn(300, 32, generator=generator)  # logits of a few nats
    target = torch.randint(3, 300, (60,), generator=generator)
    target[50:] = PAD
    results = []
    for route in (False, True):
        leaves = [t.clone().requires_grad_() for t in (first, second, weight)]
        with bf16.products() if route else contextlib.nullcontext():
            loss, _ = rdrop_module._ProjectedRDrop.apply(*leaves, target, 0.1, PAD, 5.0)
        loss.backward()
        results.append((loss, [leaf.grad for leaf in leaves]))
    assert len(made) == 1
    (exact, exact_grads), (low, low_grads) = results
    torch.testing.assert_close(low, exact, rtol=1e-2, atol=0)
    for ours, theirs in zip(low_grads, exact_grads, strict=True):
        assert (ours - theirs).norm() <= 2e-2 * theirs.norm()


def test_a_resumed_run_begins_rdrop_where_an_unbroken_one_does(tmp_path, monkeypatch):
    data = small_reverse_data(tmp_path)
    received: list[tuple[str, int]] = []
    real = step_module.rdrop_loss
    current = {}

    def recording(network, batch, eps, pad, alpha):
        trainer = current["trainer"]
        received.append((trainer.run_dir.name, trainer.progress.step + 1))
        return real(network, batch, eps, pad, alpha)

    monkeypatch.setattr(step_module, "rdrop_loss", recording)
    settings = LEARNER_MODEL | {"model.dropout": 0.1, "train.valid_every": 2}
    settings |= {"train.valid_bleu": False, "train.keep_last": 2, "train.average_last": 1}
    settings |= {"train.rdrop": 2.5, "train.rdrop_after": 2}

    def run(name: str, steps: int, resume: bool) -> dict:
        config = override(tiny(), settings | {"train.max_steps": steps})
        current["trainer"] = Trainer(config, data, tmp_path / name, resume, torch.device("cpu"))
        return load(current["trainer"].run())["model"]

    unbroken = run("unbroken", 4, resume=False)
    run("resumed", 2, resume=False)  # stopped at update 2, R-Drop not yet begun
    resumed = run("resumed", 4, resume=True)
    assert received == [("unbroken", 3), ("unbroken", 4), ("resumed", 3), ("resumed", 4)]
    for name, weight in unbroken.items():
        torch.testing.assert_close(resumed[name], weight, rtol=0, atol=0, msg=name)
