"""The training loop's wiring: what it actually hands the optimiser, the loss and the model.

The formulas have their own tests (test_schedule.py, test_loss.py); these check that the loop
uses them as the config says: the rate Adam steps with, the smoothing the loss gets, and where
dropout is on.
"""

import math

import pytest
import torch
from torch import nn

import transduce.models.attention as attention_module
import transduce.training.loop as loop_module
import transduce.training.step as step_module
from transduce.config import override
from transduce.data.corpus import LengthFilter
from transduce.data.dataset import PreparedData, prepare
from transduce.models.dropout import Dropout
from transduce.presets import tiny
from transduce.training import validation
from transduce.training.loop import Trainer
from transduce.training.schedule import learning_rate

from .conftest import LEARNER_MODEL, reverse_task_files

SETTINGS = LEARNER_MODEL | {
    "train.max_steps": 12,
    "train.valid_every": 6,
    "train.keep_last": 2,
    "train.average_last": 1,
    "train.warmup_steps": 8,  # the rate rises for 8 updates and then falls: both in 12
    "train.lr_scale": 0.7,
    "train.valid_bleu": False,
    "train.cooldown": 0.0,  # eq. 3 to the end; the cooldown's tests set their own
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> PreparedData:
    folder = tmp_path_factory.mktemp("wiring")
    splits = reverse_task_files(folder, n_train=300, n_dev=10)
    return prepare(
        splits, folder / "data", vocab_size=16, length_filter=LengthFilter(), description={}
    )


def _trainer(data, run_dir, resume=False, **changes):
    config = override(override(tiny(), SETTINGS), changes)
    return Trainer(config, data, run_dir, resume, torch.device("cpu"))


def _dev_losses(monkeypatch, losses) -> None:
    """The loop's validations see these dev losses, one after another."""
    remaining = iter(losses)
    dev = lambda *args: {"loss": next(remaining), "nll": 1.0, "ppl": math.e}  # noqa: E731
    monkeypatch.setattr(validation, "dev_loss", dev)


def _record_rates(trainer) -> list[float]:
    rates, step = [], trainer.optimizer.step

    def recording_step(*args, **kwargs):
        rates.append(trainer.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    trainer.optimizer.step = recording_step
    return rates


def test_adam_steps_with_the_rate_of_equation_3(data, tmp_path):
    trainer = _trainer(data, tmp_path / "run")
    rates = _record_rates(trainer)
    trainer.run()
    d_model = trainer.config.model.d_model
    expected = [learning_rate(step, d_model, 8, 0.7) for step in range(1, 13)]
    assert rates == pytest.approx(expected, rel=1e-12)
    assert max(rates) == rates[7]  # the peak at step == warmup_steps


def test_the_constant_schedule_holds_its_rate(data, tmp_path):
    trainer = _trainer(data, tmp_path / "run", **{"train.schedule": "constant", "train.lr": 3e-4})
    rates = _record_rates(trainer)
    trainer.run()
    assert rates == [3e-4] * 12


def test_the_cooldown_takes_the_rate_linearly_down_over_the_last_steps(data, tmp_path):
    trainer = _trainer(data, tmp_path / "run", **{"train.cooldown": 0.25})
    rates = _record_rates(trainer)
    trainer.run()
    d_model = trainer.config.model.d_model
    # Before update k, (k - 1) / 12 of the budget is spent; the last quarter cools.
    factor = lambda k: min(1.0, (1 - (k - 1) / 12) / 0.25)  # noqa: E731
    expected = [learning_rate(k, d_model, 8, 0.7) * factor(k) for k in range(1, 13)]
    assert rates == pytest.approx(expected, rel=1e-12)
    eq3 = [learning_rate(k, d_model, 8, 0.7) for k in (10, 11, 12)]
    assert rates[-3:] == pytest.approx([eq3[0], eq3[1] * 2 / 3, eq3[2] / 3], rel=1e-12)


def test_a_run_in_epochs_cools_down_by_the_batches_it_has_gone_through(data, tmp_path):
    """With `train.max_epochs` the budget spent before an update is the epochs gone through,
    counted in batches: over one epoch of n batches the last half cools linearly to the end."""
    changes = {"train.max_epochs": 1, "train.max_steps": 10_000, "train.cooldown": 0.5}
    trainer = _trainer(data, tmp_path / "run", **changes)
    n = trainer.epochs.num_batches(0)
    rates = _record_rates(trainer)
    trainer.run()
    d_model = trainer.config.model.d_model
    factor = lambda k: min(1.0, (1 - (k - 1) / n) / 0.5)  # noqa: E731
    expected = [learning_rate(k, d_model, 8, 0.7) * factor(k) for k in range(1, n + 1)]
    assert n >= 4 and rates == pytest.approx(expected, rel=1e-12)


def test_the_plateau_schedule_hears_every_validation(data, tmp_path, monkeypatch):
    """`train.schedule=plateau` halves the rate after `plateau_patience` validations without a
    lower dev loss: the loop hands each validation's record to the schedule. Here the dev loss
    rises after the first validation (at 3), so the rate halves after each of 6, 9 and 12."""
    _dev_losses(monkeypatch, [1.0, 2.0, 3.0, 4.0])
    changes = {"train.schedule": "plateau", "train.lr": 0.01, "train.plateau_patience": 1}
    trainer = _trainer(data, tmp_path / "run", **changes, **{"train.valid_every": 3})
    rates = _record_rates(trainer)
    trainer.run()
    assert rates == pytest.approx([0.01] * 6 + [0.005] * 3 + [0.0025] * 3)


def test_without_a_dev_score_the_best_checkpoint_is_the_lowest_dev_loss(
    data, tmp_path, monkeypatch
):
    """`train.valid_bleu=false`: best.pt is the validation of the lowest dev loss, here the
    second of four (3.0, 1.0, 2.0, 4.0)."""
    from transduce.training.checkpoint import load

    _dev_losses(monkeypatch, [3.0, 1.0, 2.0, 4.0])
    trainer = _trainer(data, tmp_path / "run", **{"train.valid_every": 3})
    trainer.run()
    assert load(trainer.store.best_path())["step"] == 6


class _Clock:
    """time.monotonic for the loop: every reading is 3 seconds after the last."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 3.0
        return self.now


def test_a_run_in_minutes_cools_down_by_its_clock_and_stops_at_the_budget(
    data, tmp_path, monkeypatch
):
    monkeypatch.setattr(loop_module, "time", _Clock())
    budget = {"train.max_minutes": 0.5, "train.max_steps": 40, "train.cooldown": 0.5}
    trainer = _trainer(data, tmp_path / "run", **{"train.schedule": "constant", **budget})
    rates = _record_rates(trainer)
    trainer.run()
    # Update k starts after 3 (k - 1) of the 30 seconds; the second half of the time cools.
    assert trainer.progress.step == 10
    assert rates == pytest.approx([1e-3] * 6 + [8e-4, 6e-4, 4e-4, 2e-4], rel=1e-12)


def test_a_resumed_run_in_minutes_counts_the_minutes_of_its_earlier_sessions(
    data, tmp_path, monkeypatch
):
    """The budget in minutes is the run's, not a session's: stopped after 4 updates (12 of its
    30 seconds) and resumed, it stops where an uninterrupted run does, at update 10."""
    budget = {"train.max_minutes": 0.5, "train.schedule": "constant", "train.valid_every": 2}
    monkeypatch.setattr(loop_module, "time", _Clock())
    _trainer(data, tmp_path / "run", **budget, **{"train.max_steps": 4}).run()
    monkeypatch.setattr(loop_module, "time", _Clock())  # a new session's clock
    resumed = _trainer(data, tmp_path / "run", True, **budget, **{"train.max_steps": 40})
    resumed.run()
    assert resumed.progress.step == 10


def test_each_training_log_line_covers_the_updates_since_the_last(data, tmp_path):
    """`train.log_every`: a line every 3 updates, each over its own 3 (not the run so far)."""
    from transduce.training.runlog import read_log

    _trainer(data, tmp_path / "run", **{"train.log_every": 3}).run()
    lines = [r for r in read_log(tmp_path / "run" / "log.jsonl") if r["kind"] == "train"]
    assert [(r["step"], r["updates"]) for r in lines] == [(3, 3), (6, 3), (9, 3), (12, 3)]


def test_the_loss_receives_the_configured_label_smoothing(data, tmp_path, monkeypatch):
    received, real = [], step_module.model_loss

    def recording_loss(network, batch, eps, pad, fused):
        received.append(eps)
        return real(network, batch, eps, pad, fused)

    monkeypatch.setattr(step_module, "model_loss", recording_loss)
    _trainer(data, tmp_path / "run", **{"train.label_smoothing": 0.17}).run()
    assert received and set(received) == {0.17}


@pytest.mark.parametrize("clip_norm", [0.37, 0.0])
def test_gradients_are_clipped_to_the_configured_norm_and_only_when_asked(
    data, tmp_path, monkeypatch, clip_norm
):
    """`train.clip_norm` reaches every update's clipping (the RNN presets' 5.0); 0 clips
    nothing, as the paper's Transformer trains."""
    norms, real = [], torch.nn.utils.clip_grad_norm_

    def recording_clip(parameters, max_norm, *args, **kwargs):
        norms.append(max_norm)
        return real(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording_clip)
    _trainer(data, tmp_path / "run", **{"train.clip_norm": clip_norm}).run()
    assert norms == ([clip_norm] * SETTINGS["train.max_steps"] if clip_norm else [])


def _dropout_sites(model: nn.Module) -> dict[str, Dropout]:
    """The dropout modules, which are all transduce's own (the CPU's cheaper mask)."""
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
    return {name: m for name, m in model.named_modules() if isinstance(m, Dropout)}


def _without_dropout(inputs: tuple) -> torch.Tensor:
    """A dropout module's output had it dropped nothing: its input, or at a residual connection
    (the residual its second input) their sum."""
    return inputs[0] if len(inputs) == 1 else inputs[1] + inputs[0]


def test_dropout_is_on_at_the_embeddings_every_sublayer_and_the_ffn_in_training_only(
    data, tmp_path
):
    trainer = _trainer(data, tmp_path / "run", **{"model.dropout": 0.3, "model.relu_dropout": 0.2})
    sites = _dropout_sites(trainer.model)
    n_layers = trainer.config.model.n_layers
    rates = {"src_embed.dropout": 0.3, "tgt_embed.dropout": 0.3}
    for i in range(n_layers):
        for stack, sublayers in (
            ("encoder", ("self_attn", "ffn")),
            ("decoder", ("self_attn", "cross_attn", "ffn")),
        ):
            rates |= {f"{stack}_layers.{i}.{s}_residual.dropout": 0.3 for s in sublayers}
            rates[f"{stack}_layers.{i}.ffn.dropout"] = 0.2  # on the ReLU units
    assert set(sites) == set(rates)
    calls: dict[str, list[bool]] = {name: [] for name in sites}

    def hook(name):
        def record(module, inputs, output):
            # on: some activations zeroed and the rest scaled by 1 / (1 - p); off: unchanged
            changed = not torch.equal(_without_dropout(inputs), output)
            calls[name].append((module.training, module.p, changed))

        return record

    for name, module in sites.items():
        module.register_forward_hook(hook(name))
    trainer.run()  # trains 12 updates, validates twice
    for name, seen in calls.items():
        training = [c for c in seen if c[0]]
        evaluation = [c for c in seen if not c[0]]
        assert training and all(p == rates[name] and changed for _, p, changed in training), name
        assert evaluation and not any(changed for _, _, changed in evaluation), name


def test_attention_dropout_reaches_every_attention_in_training_only(data, tmp_path, monkeypatch):
    trainer = _trainer(data, tmp_path / "run", **{"model.attention_dropout": 0.25})
    seen: list[tuple[bool, float]] = []
    kernel = attention_module.F.scaled_dot_product_attention
    explicit = attention_module.attention_reference

    def recording_kernel(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        seen.append((torch.is_grad_enabled(), dropout_p))
        return kernel(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)

    def recording_explicit(q, k, v, mask, dropout=0.0):  # short spans, and decoding's steps
        seen.append((torch.is_grad_enabled(), dropout))
        return explicit(q, k, v, mask, dropout)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", recording_kernel)
    monkeypatch.setattr(attention_module, "attention_reference", recording_explicit)
    trainer.run()
    training = [p for grad, p in seen if grad]
    evaluation = [p for grad, p in seen if not grad]
    n_layers = trainer.config.model.n_layers
    # each update: n_layers encoder self-, decoder self- and cross-attentions, all at 0.25
    assert len(training) >= 12 * 3 * n_layers and set(training) == {0.25}
    assert evaluation and set(evaluation) == {0.0}


LATE = {"model.dropout": 0.3, "model.relu_dropout": 0.2, "model.attention_dropout": 0.25}


def test_late_dropout_trains_its_first_updates_without_any_dropout_also_when_resumed(
    data, tmp_path, monkeypatch
):
    """train.late_dropout=5: updates 1-5 drop nothing anywhere (residuals, embeddings, the
    FFN's units, attention's weights), 6 on at the model's own rates; a run stopped after
    update 3 and resumed switches at the same update."""
    seen: list[tuple[int, str, float, bool]] = []  # (update, site, rate, anything zeroed)
    kernel = attention_module.F.scaled_dot_product_attention
    explicit = attention_module.attention_reference

    def recording_kernel(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        if torch.is_grad_enabled():
            seen.append((trainer.progress.step + 1, "attention", dropout_p, dropout_p > 0))
        return kernel(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)

    def recording_explicit(q, k, v, mask, dropout=0.0):  # short spans
        if torch.is_grad_enabled():
            seen.append((trainer.progress.step + 1, "attention", dropout, dropout > 0))
        return explicit(q, k, v, mask, dropout)

    def hook(name):
        def record(module, inputs, output):
            if module.training:
                zeroed = not torch.equal(_without_dropout(inputs), output)
                seen.append((trainer.progress.step + 1, name, module.p, zeroed))

        return record

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", recording_kernel)
    monkeypatch.setattr(attention_module, "attention_reference", recording_explicit)
    for resume, steps in ((False, 3), (True, 12)):
        settings = LATE | {"train.late_dropout": 5, "train.max_steps": steps}
        trainer = _trainer(data, tmp_path / "run", resume, **settings)
        for name, module in _dropout_sites(trainer.model).items():
            module.register_forward_hook(hook(name))
        trainer.run()
    rates = {"attention": 0.25} | {n: m.p for n, m in _dropout_sites(trainer.model).items()}
    assert {r for n, r in rates.items() if n != "attention"} == {0.3, 0.2}
    for update in range(1, 13):
        at = [(site, rate, zeroed) for u, site, rate, zeroed in seen if u == update]
        assert {site for site, _, _ in at} == set(rates), update
        if update <= 5:
            assert all(rate == 0.0 and not zeroed for _, rate, zeroed in at), update
        else:
            assert all(rate == rates[site] and zeroed for site, rate, zeroed in at), update


def test_late_dropouts_first_updates_are_those_of_the_model_without_dropout(data, tmp_path):
    """Bit for bit: the same parameters after 4 updates as a run whose rates are all 0, and
    not after 5 with dropout on from update 5."""

    def parameters(run: str, updates: int, **changes) -> list[torch.Tensor]:
        trainer = _trainer(data, tmp_path / run, **changes, **{"train.max_steps": updates})
        trainer.run()
        return [p.detach().clone() for p in trainer.model.parameters()]

    def equal(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
        return all(torch.equal(a, b) for a, b in zip(first, second, strict=True))

    none = {"model.dropout": 0.0, "model.relu_dropout": 0.0, "model.attention_dropout": 0.0}
    late = LATE | {"train.late_dropout": 4}
    assert equal(parameters("late-4", 4, **late), parameters("none-4", 4, **none))
    assert not equal(parameters("late-5", 5, **late), parameters("none-5", 5, **none))


def test_train_step_descends_the_per_token_loss_of_the_whole_group_with_clipping():
    """SGD through `train_step` moves each parameter by -rate * clip(grad of the loss per target
    token of both batches together), the gradient computed here independently."""
    from transduce.data.batching import collate
    from transduce.training.loss import label_smoothed_loss
    from transduce.training.step import train_step

    from .conftest import BOS, EOS, PAD, tiny_model

    model = tiny_model(5)
    pairs = [([4, 5, 6], [7, 8]), ([9], [10, 11, 4, 5]), ([6, 6], [8])]
    batches = [collate(pairs[:2], PAD, BOS, EOS), collate(pairs[2:], PAD, BOS, EOS)]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    n_tokens = sum(b.n_tgt_tokens for b in batches)
    sums = [label_smoothed_loss(model(b.src, b.tgt_in), b.tgt_out, 0.1, PAD) for b in batches]
    total, nll = sum(s.loss for s in sums), sum(float(s.nll.detach()) for s in sums)
    grads = torch.autograd.grad(total / n_tokens, list(model.parameters()))
    norm = torch.sqrt(sum((g**2).sum() for g in grads))
    scale = min(1.0, 0.05 / float(norm))  # clip_grad_norm_ to 0.05
    model.zero_grad()
    optimizer = torch.optim.SGD(model.parameters(), lr=123.0)  # train_step sets the rate
    result = train_step(
        model, optimizer, batches, rate=0.5, label_smoothing=0.1, pad=PAD, clip_norm=0.05
    )
    assert result.finite and result.tgt_tokens == n_tokens
    assert result.loss == pytest.approx(float(total.detach()) / n_tokens)
    assert result.nll == pytest.approx(nll / n_tokens)  # the plain nll, for perplexity
    assert abs(result.nll - result.loss) > 1e-3  # (the smoothed loss is another number)
    assert norm > 0.05  # clipping was exercised
    for (name, p), g in zip(model.named_parameters(), grads, strict=True):
        torch.testing.assert_close(p.detach(), before[name] - 0.5 * scale * g, msg=name)
    nan = [collate(pairs[:1], PAD, BOS, EOS)]
    with torch.no_grad():
        model.src_embed.tokens.weight[4] = float("nan")  # every loss is now NaN
    after_nan = {n: p.detach().clone() for n, p in model.named_parameters()}
    skipped = train_step(model, optimizer, nan, rate=0.5, label_smoothing=0.1, pad=PAD)
    assert not skipped.finite
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), after_nan[name], equal_nan=True, msg=name)


def test_train_step_reads_the_loss_only_once_every_backward_is_queued(monkeypatch):
    """A GPU keeps working while the host waits for the loss: `train_step` reads the forwards'
    sums after the group's last backward, not after each forward (which on a GPU would leave it
    idle while the host queues the next batch), and the sums read are the forwards' own."""
    from transduce.data.batching import collate
    from transduce.training import step
    from transduce.training.loss import label_smoothed_loss

    from .conftest import BOS, EOS, PAD, tiny_model

    model = tiny_model(5)
    pairs = [([4, 5, 6], [7, 8]), ([9], [10, 11, 4, 5]), ([6, 6], [8])]
    batches = [collate(pairs[:2], PAD, BOS, EOS), collate(pairs[2:], PAD, BOS, EOS)]
    with torch.no_grad():
        expected = sum(
            float(label_smoothed_loss(model(b.src, b.tgt_in), b.tgt_out, 0.1, PAD).loss)
            for b in batches
        )
    events = []
    model.src_embed.tokens.weight.register_hook(lambda grad: events.append("backward"))
    read = step._HostReading.values
    monkeypatch.setattr(
        step._HostReading, "values", lambda self: events.append("read") or read(self)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    result = step.train_step(model, optimizer, batches, rate=0.0, label_smoothing=0.1, pad=PAD)
    assert events == ["backward", "backward", "read", "read"]
    n_tokens = sum(b.n_tgt_tokens for b in batches)
    assert result.loss == pytest.approx(expected / n_tokens)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_an_update_on_a_gpu_never_waits_for_the_gpu_queue_to_drain():
    """On a GPU the only wait of an update is for the forwards' sums (a CUDA event), never a
    synchronising copy or `.item()` (torch's sync debug mode raises on those)."""
    from transduce.data.batching import collate
    from transduce.training.step import train_step

    from .conftest import BOS, EOS, PAD, tiny_model

    model = tiny_model(5).cuda()
    pairs = [([4, 5, 6], [7, 8]), ([9], [10, 11, 4, 5]), ([6, 6], [8])]
    batches = [collate(pairs, PAD, BOS, EOS).to("cuda")]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    train_step(model, optimizer, batches, rate=1e-3, label_smoothing=0.1, pad=PAD)  # warm
    torch.cuda.set_sync_debug_mode("error")
    try:
        result = train_step(
            model, optimizer, batches, rate=1e-3, label_smoothing=0.1, pad=PAD, clip_norm=1.0
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert result.finite and result.tgt_tokens == batches[0].n_tgt_tokens


PLATEAU = {"train.schedule": "plateau", "train.lr": 0.01, "train.plateau_patience": 1}


def test_a_resumed_plateau_run_keeps_the_rate_its_validations_lowered(data, tmp_path, monkeypatch):
    """Validations at 3 and 6: the dev loss rises at 6, so the rate halves from update 7. Run to
    6, then resumed to 9: updates 7-9 take the halved rate and the validation at 9 (no better)
    halves it again, as an uninterrupted run does."""
    run = tmp_path / "run"
    _dev_losses(monkeypatch, [1.0, 2.0])
    first = _trainer(data, run, **PLATEAU, **{"train.valid_every": 3, "train.max_steps": 6})
    first.run()
    _dev_losses(monkeypatch, [3.0])
    resumed = _trainer(
        data, run, resume=True, **PLATEAU, **{"train.valid_every": 3, "train.max_steps": 9}
    )
    assert resumed.progress.step == 6
    assert resumed.schedule.state_dict() == {"lr": 0.005, "best": 1.0, "bad": 0}
    rates = _record_rates(resumed)
    resumed.run()
    assert rates == [0.005] * 3
    assert resumed.schedule.state_dict()["lr"] == 0.0025


def test_the_store_keeps_and_the_final_model_averages_the_configured_number_of_checkpoints(
    data, tmp_path, monkeypatch
):
    """`train.keep_last` and `average_last` reach the store and the average (s6.1 averages the
    last 5 or 20): here the last 3 of 6 validations, with the best (the first) kept beside."""
    from transduce.training.checkpoint import load

    _dev_losses(monkeypatch, [1.0] + [2.0] * 5)
    monkeypatch.setattr(loop_module, "plot_learning_curve", lambda *args: None)  # 0.5 s each
    changes = {"train.valid_every": 2, "train.keep_last": 3, "train.average_last": 3}
    trainer = _trainer(data, tmp_path / "run", **changes, **{"train.warmup_steps": 1})
    trainer.run()
    assert trainer.store.steps() == [2, 8, 10, 12]
    averaged = load(tmp_path / "run" / "average.pt")["averaged_from"]
    assert averaged == [str(trainer.store.path(s)) for s in (8, 10, 12)]


def test_training_batches_carry_the_bos_and_eos_the_search_starts_and_stops_with(
    data, tmp_path, monkeypatch
):
    """The decoder is taught to start from bos and to end with eos, the ids the search starts
    from and stops at (decoding/translate.py); a source ends with eos, as the search gives it."""
    seen, real = [], step_module.model_loss

    def recording_loss(network, batch, eps, pad, fused):
        seen.append(batch)
        return real(network, batch, eps, pad, fused)

    monkeypatch.setattr(step_module, "model_loss", recording_loss)
    trainer = _trainer(data, tmp_path / "run", **{"train.max_steps": 2, "train.valid_every": 2})
    trainer.run()
    vocab = data.vocab
    assert len(seen) == 2 and vocab.bos != vocab.eos
    for batch in seen:
        assert (batch.tgt_in[:, 0] == vocab.bos).all()
        for side in (batch.src, batch.tgt_out):
            last = (side != vocab.pad).sum(1) - 1  # each row's last real token
            assert (side.gather(1, last[:, None]) == vocab.eos).all()
            assert (side == vocab.bos).sum() == 0


def test_a_non_finite_loss_in_any_batch_of_the_group_skips_the_update():
    """With accumulation (the paper's 8 devices on one), one batch's NaN loss poisons the whole
    group's gradient: the update is skipped and the parameters stay as they were."""
    from transduce.data.batching import collate
    from transduce.training.step import train_step

    from .conftest import BOS, EOS, PAD, tiny_model

    model = tiny_model(5, share_embeddings=False)  # the source's embeddings its own
    with torch.no_grad():
        model.src_embed.tokens.weight[9] = float("nan")  # only the second batch's source has 9
    batches = [collate([([4, 5, 6], [7, 8])], PAD, BOS, EOS), collate([([9], [10])], PAD, BOS, EOS)]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    result = train_step(model, optimizer, batches, rate=0.5, label_smoothing=0.1, pad=PAD)
    assert not result.finite
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), before[name], equal_nan=True, msg=name)
