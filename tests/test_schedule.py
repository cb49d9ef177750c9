import pytest
import torch

from transduce.config import override
from transduce.models.derived import copy_of
from transduce.presets import tiny
from transduce.training.checkpoint import steps_to_average
from transduce.training.schedule import (
    Plateau,
    budget_used,
    cooldown_factor,
    learning_rate,
    make_optimizer,
    make_schedule,
    set_learning_rate,
)


def test_eq3_peaks_at_the_end_of_warmup():
    rates = [learning_rate(s, 512, 4000) for s in range(1, 20000, 7)]
    peak_step = 1 + 7 * max(range(len(rates)), key=rates.__getitem__)
    assert abs(peak_step - 4000) <= 7
    assert learning_rate(4000, 512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)


def test_eq3_rises_linearly_then_decays_as_inverse_square_root():
    assert learning_rate(200, 512, 4000) == pytest.approx(2 * learning_rate(100, 512, 4000))
    assert learning_rate(40000, 512, 4000) == pytest.approx(learning_rate(10000, 512, 4000) / 2)


def test_the_cooldown_holds_the_rate_then_takes_it_linearly_to_zero_at_the_budget():
    used = (0.0, 0.5, 0.8, 0.9, 0.95, 1.0, 1.2)
    assert [cooldown_factor(u, 0.2) for u in used] == pytest.approx([1, 1, 1, 0.5, 0.25, 0, 0])
    assert cooldown_factor(0.999, 0.0) == 1.0  # no cooldown: the schedule to the end
    assert cooldown_factor(0.25, 1.0) == pytest.approx(0.75)  # the whole run: linear decay


def test_scale_and_the_tiny_preset_peak():
    assert learning_rate(10, 512, 4000, scale=2.0) == pytest.approx(
        2 * learning_rate(10, 512, 4000)
    )
    config = tiny()
    peak = learning_rate(
        config.train.warmup_steps, 128, config.train.warmup_steps, config.train.lr_scale
    )
    assert peak == pytest.approx(0.005)


def test_tiny_searches_as_s6_1_says_but_with_alpha_1_0_chosen_on_dev():
    from transduce.config import DecodeConfig

    assert tiny().decode == DecodeConfig(alpha=1.0)


def test_the_demo_preset_is_tiny_with_its_peak_at_200_late_dropout_alpha_1_4_and_no_average():
    from dataclasses import asdict

    from transduce.presets import demo

    config, base = demo(), tiny()
    rate = lambda step: learning_rate(  # noqa: E731
        step, 128, config.train.warmup_steps, config.train.lr_scale
    )
    assert rate(200) == pytest.approx(0.005) and rate(199) < rate(200) > rate(201)
    changed = {
        f"{section}.{key}"
        for section in ("model", "data", "train", "decode")
        for key, value in asdict(getattr(config, section)).items()
        if asdict(getattr(base, section))[key] != value
    }
    assert changed == {
        "model.dropout",
        "train.late_dropout",
        "train.warmup_steps",
        "train.lr_scale",
        "decode.alpha",
        "train.average_last",
        "train.valid_every",
    }
    assert config.model.dropout == 0.1 and config.decode.alpha == 1.4
    # none in the ten minutes of a 1.2-updates/s host; 0.1 beyond, on a faster one (DEMO.md, s50)
    assert config.train.late_dropout == 800
    assert config.train.valid_every == 250  # validations cost the ten minutes updates
    # After the cooldown the newest checkpoint alone is the final model (DEMO.md, session 26).
    final = steps_to_average([250, 500, 720], 720, config.train)
    assert config.train.average_last == 1 and final == [720]


@pytest.mark.parametrize("minutes, name", [(3, "demo"), (20, "demo"), (21, "tiny"), (60, "tiny")])
def test_the_demo_trains_the_demo_preset_up_to_20_minutes(monkeypatch, tmp_path, minutes, name):
    """`transduce demo` hands the trainer the demo preset with its minutes, `tiny` for longer
    runs (no data is read: the run stops at the trainer)."""
    import transduce.experiments.demo as demo_module
    from transduce.cli import main
    from transduce.presets import preset

    seen = {}

    class Stop(Exception):
        pass

    def trainer(config, *args, **kwargs):
        seen["config"] = config
        raise Stop

    monkeypatch.setattr(demo_module, "prepare", lambda *a, **k: type("D", (), {"path": tmp_path}))
    monkeypatch.setattr(demo_module, "corpus_files", lambda *a, **k: None)
    monkeypatch.setattr(demo_module, "train", trainer)
    with pytest.raises(Stop):
        main(["demo", "--out", str(tmp_path / "demo"), "--minutes", str(minutes)])
    budget = {"train.max_minutes": float(minutes), "train.max_steps": 10**9}
    assert seen["config"] == override(preset(name), budget)


def test_steps_count_from_one():
    with pytest.raises(ValueError):
        learning_rate(0, 512, 4000)


def test_adam_has_the_papers_hyperparameters():
    optimizer = make_optimizer([torch.nn.Parameter(torch.zeros(2))], tiny().train)
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
    assert group["weight_decay"] == 0.0  # the paper's: none
    decayed = override(tiny(), {"train.weight_decay": 0.01}).train
    assert make_optimizer([torch.nn.Parameter(torch.zeros(2))], decayed).defaults[
        "weight_decay"
    ] == pytest.approx(0.01)


def test_adam_steps_by_the_formula_of_s5_3_on_the_cpus_fused_kernel():
    """Kingma & Ba's update with the paper's betas and eps, bias-corrected, step after step; on a
    CPU through the fused kernel (one call over every parameter, not one per parameter)."""
    weight = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
    optimizer = make_optimizer([weight], tiny().train, torch.device("cpu"))
    assert optimizer.defaults["fused"]
    beta1, beta2, eps, rate = 0.9, 0.98, 1e-9, 0.01
    expected, m, v = weight.detach().double().clone(), torch.zeros(3), torch.zeros(3)
    for t, grad in enumerate(([0.1, -0.2, 0.3], [0.4, 0.0, -0.1], [-0.3, 0.2, 0.2]), start=1):
        grad = torch.tensor(grad)
        weight.grad = grad.clone()
        set_learning_rate(optimizer, rate)
        optimizer.step()
        m, v = beta1 * m + (1 - beta1) * grad, beta2 * v + (1 - beta2) * grad**2
        m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
        expected -= rate * m_hat.double() / (v_hat.double().sqrt() + eps)
        torch.testing.assert_close(weight.detach().double(), expected, rtol=1e-6, atol=1e-7)


def test_a_fused_step_counts_as_a_change_of_the_weights_for_their_kept_copies():
    """The fused kernel leaves version counters as they were; the copies kept for decoding
    (models/derived.py) would go on serving the weights of before the step."""
    weight = torch.nn.Parameter(torch.ones(2, 2))
    optimizer = make_optimizer([weight], tiny().train, torch.device("cpu"))
    store = {}
    copy_of(store, weight, lambda w: w.detach().clone())
    weight.grad = torch.ones(2, 2)
    set_learning_rate(optimizer, 0.1)
    optimizer.step()
    assert not torch.equal(weight.detach(), torch.ones(2, 2))
    torch.testing.assert_close(
        copy_of(store, weight, lambda w: w.detach().clone()), weight.detach()
    )


def test_the_rate_is_set_in_every_parameter_group():
    weights, biases = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([{"params": [weights]}, {"params": [biases]}], lr=0.0)
    set_learning_rate(optimizer, 3e-4)
    assert [group["lr"] for group in optimizer.param_groups] == [3e-4, 3e-4]


def test_the_budget_used_is_the_largest_fraction_of_the_limits_set():
    """The cooldown starts from whichever limit ends the run first: updates, epochs or minutes."""
    steps_only = override(tiny(), {"train.max_steps": 1000}).train
    assert budget_used(steps_only, 250, epochs=9.0, elapsed=10**6) == pytest.approx(0.25)
    epochs = override(tiny(), {"train.max_steps": 1000, "train.max_epochs": 4}).train
    assert budget_used(epochs, 250, epochs=3.0, elapsed=10**6) == pytest.approx(0.75)
    minutes = override(tiny(), {"train.max_steps": 1000, "train.max_minutes": 10.0}).train
    assert budget_used(minutes, 250, epochs=3.0, elapsed=540.0) == pytest.approx(0.9)


def test_plateau_halves_the_rate_after_patience_validations_without_a_lower_dev_loss():
    schedule = Plateau(1.0, factor=0.5, patience=2)
    rates = []
    for loss in [3.0, 2.0, 2.5, 2.0, 1.9, 1.9, 1.95, 1.8]:  # equal is no improvement
        schedule.observe({"loss": loss})
        rates.append(schedule.rate(1))
    assert rates == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]
    again = Plateau(1.0, factor=0.5, patience=2)
    for loss in [2.0, 2.1, 2.2, 2.3]:  # the count starts again after a cut
        again.observe({"loss": loss})
    assert again.rate(1) == 0.5
    floored = Plateau(1.0, factor=0.5, patience=1, min_lr=0.3)
    for loss in [1.0, 2.0, 2.0, 2.0]:
        floored.observe({"loss": loss})
    assert floored.rate(1) == 0.3


def test_plateau_continues_from_its_saved_state():
    schedule, copy = Plateau(1.0, 0.5, 2), Plateau(1.0, 0.5, 2)
    for loss in [2.0, 2.1]:
        schedule.observe({"loss": loss})
    copy.load_state_dict(schedule.state_dict())
    for one in (schedule, copy):
        one.observe({"loss": 2.2})  # the second validation without improvement
    assert schedule.rate(5) == copy.rate(5) == 0.5


def test_the_schedule_is_chosen_by_config():
    settings = {"train.schedule": "plateau", "train.lr": "0.002", "train.plateau_patience": "3"}
    schedule = make_schedule(override(tiny(), settings))
    assert isinstance(schedule, Plateau) and (schedule.rate(1), schedule.patience) == (0.002, 3)
    assert make_schedule(tiny()).state_dict() == {}  # eq. 3 is a function of the step alone


def test_the_final_average_takes_the_last_checkpoints_past_the_warmup_and_the_runs_half():
    """`steps_to_average`: of the kept checkpoints, those at or past both the warmup's end and
    half the run, the last `average_last` of them; never one newer than the run's end."""
    from transduce.config import TrainConfig

    kept = list(range(100, 1001, 100))
    # half the run binds (500), then the warmup (800)
    past_half = TrainConfig(warmup_steps=100, average_last=20, keep_last=20)
    assert steps_to_average(kept, 1000, past_half) == [500, 600, 700, 800, 900, 1000]
    past_warmup = TrainConfig(warmup_steps=800, average_last=20, keep_last=20)
    assert steps_to_average(kept, 1000, past_warmup) == [800, 900, 1000]
    last_two = TrainConfig(warmup_steps=100, average_last=2)
    assert steps_to_average(kept, 1000, last_two) == [900, 1000]
    # a file newer than the end (an abandoned timeline's) never joins
    assert steps_to_average([*kept, 1100], 1000, last_two) == [900, 1000]
