import pytest
import torch

from transduce.presets import tiny
from transduce.training.schedule import learning_rate, make_optimizer


def test_eq3_peaks_at_the_end_of_warmup():
    rates = [learning_rate(s, 512, 4000) for s in range(1, 20000, 7)]
    peak_step = 1 + 7 * max(range(len(rates)), key=rates.__getitem__)
    assert abs(peak_step - 4000) <= 7
    assert learning_rate(4000, 512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)


def test_eq3_rises_linearly_then_decays_as_inverse_square_root():
    assert learning_rate(200, 512, 4000) == pytest.approx(2 * learning_rate(100, 512, 4000))
    assert learning_rate(40000, 512, 4000) == pytest.approx(learning_rate(10000, 512, 4000) / 2)


def test_scale_and_the_tiny_preset_peak():
    assert learning_rate(10, 512, 4000, scale=2.0) == pytest.approx(
        2 * learning_rate(10, 512, 4000)
    )
    config = tiny()
    peak = learning_rate(
        config.train.warmup_steps, 128, config.train.warmup_steps, config.train.lr_scale
    )
    assert peak == pytest.approx(0.005)


def test_steps_count_from_one():
    with pytest.raises(ValueError):
        learning_rate(0, 512, 4000)


def test_adam_has_the_papers_hyperparameters():
    optimizer = make_optimizer([torch.nn.Parameter(torch.zeros(2))], tiny().train)
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
