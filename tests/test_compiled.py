"""train.compile: the layers and the loss through torch.compile compute what the written code does,
only training goes through them, and the Trainer hands the compiled path its batches.

These compile for real (Inductor's C++ backend on the CPU), so the file costs half a minute; the
compiled graphs are shared by every test here (one dtype, dynamic shapes).
"""

from contextlib import nullcontext

import pytest
import torch
from torch._dynamo.utils import counters

from transduce.config import ConfigError, override
from transduce.data.batching import collate
from transduce.data.dataset import PreparedData
from transduce.models.attention import EXPLICIT_TRAINING_SPAN
from transduce.training import step as step_module
from transduce.training.compiled import compile_layers, compiles
from transduce.training.loop import Trainer
from transduce.training.loss import label_smoothed_loss, model_loss

from .conftest import BOS, EOS, PAD, prepared_reverse_task, tiny_model, tiny_rnn
from .test_train import toy_config

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")


@pytest.fixture
def compiled_calls(monkeypatch) -> list:
    """Records each call of a function made by torch.compile from here on."""
    calls, real = [], torch.compile

    def recording(function, **options):
        compiled = real(function, **options)

        def call(*args, **kwargs):
            calls.append(function)
            return compiled(*args, **kwargs)

        return call

    monkeypatch.setattr(torch, "compile", recording)
    return calls


def _batches():
    """Two batches of different shapes, with padding on both sides."""
    return [
        collate([([4, 5, 6, 7], [8, 9]), ([10], [11, 4, 5])], PAD, BOS, EOS),
        collate([([4, 5], [6, 7, 8, 9, 10]), ([11, 4, 5], [6]), ([7], [8, 9])], PAD, BOS, EOS),
    ]


def _gradients(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_compiled_layers_train_as_the_written_ones(compiled_calls):
    written, compiled = tiny_model(dtype=torch.float32).train(), tiny_model(dtype=torch.float32)
    compiled.train()
    assert compile_layers(compiled) == 4  # 2 encoder + 2 decoder layers
    for batch in _batches():  # two shapes
        for model in (written, compiled):
            model.zero_grad()
            sums = model_loss(model, batch, 0.1, PAD)
            sums.loss.backward()
            model.loss = sums.loss.item()
        assert compiled.loss == pytest.approx(written.loss, rel=1e-5)
        # float32 rounding apart: Inductor fuses the explicit attention's softmax and its backward
        torch.testing.assert_close(_gradients(compiled), _gradients(written), rtol=1e-4, atol=1e-5)
    assert len(compiled_calls) == 2 * 4  # every layer, every batch, through the compiled code


def test_evaluation_and_decoding_run_the_layers_as_written(compiled_calls):
    model = tiny_model(dtype=torch.float32)
    compile_layers(model)
    batch = _batches()[0]
    with torch.no_grad():
        eval_logits = model.eval()(batch.src, batch.tgt_in)
        model.train()(batch.src, batch.tgt_in)  # no gradient: as written even in training mode
    assert compiled_calls == []
    written = tiny_model(dtype=torch.float32).eval()
    torch.testing.assert_close(eval_logits, written(batch.src, batch.tgt_in))


def test_a_layer_in_evaluation_mode_runs_as_written_even_with_gradients_on(compiled_calls):
    """Training mode and a gradient both: a gradient taken through a model in eval mode (a
    saliency map, say) runs the layers as written, whose many shapes would each compile."""
    model = tiny_model(dtype=torch.float32).eval()
    compile_layers(model)
    batch = _batches()[0]
    model(batch.src, batch.tgt_in).sum().backward()
    assert compiled_calls == []


def test_the_fused_sums_equal_the_written_ones():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 40).bfloat16()
    target = torch.randint(1, 40, (3, 5))
    target[0, 3:] = PAD
    fused = label_smoothed_loss(logits, target, 0.1, PAD, fused=True)
    written = label_smoothed_loss(logits, target, 0.1, PAD)
    assert fused.n_tokens == written.n_tokens == 13
    assert fused.loss.item() == pytest.approx(written.loss.item(), rel=1e-5)
    assert fused.nll.item() == pytest.approx(written.nll.item(), rel=1e-5)


def test_auto_compiles_on_gpus_only_and_bad_choices_are_refused():
    assert compiles("auto", torch.device("cuda")) and not compiles("auto", torch.device("cpu"))
    assert compiles("on", torch.device("cpu")) and not compiles("off", torch.device("cuda"))
    # Measured on CUDA only: Apple's and Intel's GPUs train as written unless asked
    assert not compiles("auto", torch.device("mps")) and not compiles("auto", torch.device("xpu"))
    with pytest.raises(ConfigError, match=r"train\.compile"):
        toy_config(**{"train.compile": "yes"})


def test_a_model_without_stacks_of_layers_trains_as_written():
    assert compile_layers(tiny_rnn()) == 0


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    folder = prepared_reverse_task(tmp_path_factory.mktemp("toy"), n_train=300, n_dev=10)
    return PreparedData.load(folder)


def test_the_trainer_trains_the_same_compiled_and_hands_the_step_the_fused_loss(
    toy_data, tmp_path, monkeypatch
):
    fused_seen, real = [], step_module.model_loss

    def recording(network, batch, eps, pad, fused):
        fused_seen.append(fused)
        return real(network, batch, eps, pad, fused)

    monkeypatch.setattr(step_module, "model_loss", recording)
    losses = {}
    for choice in ("off", "on"):
        config = override(toy_config(), {"train.compile": choice})
        trainer = Trainer(config, toy_data, tmp_path / choice, False, torch.device("cpu"))
        assert trainer.compiled == (choice == "on")
        groups = [[pairs] for pairs in list(trainer.epochs.batches(0))[:3]]
        losses[choice] = [trainer._update(group, rate=1e-3).loss for group in groups]
    assert fused_seen == [False] * 3 + [True] * 3
    assert losses["on"] == pytest.approx(losses["off"], rel=1e-4)


def test_dropout_traces_whole_under_compile():
    """The CPU's cheaper dropout mask (an in-place random_) would break the compiled graph in
    two at every sublayer; traced, dropout is PyTorch's own."""
    from transduce.models.dropout import Dropout

    explained = torch._dynamo.explain(Dropout(0.1).train())(torch.randn(4, 8))
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def _projected_case(device: str, dtype: torch.dtype):
    torch.manual_seed(5)
    hidden = torch.randn(3, 6, 16, device=device, dtype=dtype, requires_grad=True)
    weight = torch.randn(300, 16, device=device, dtype=dtype, requires_grad=True)
    target = torch.randint(4, 300, (3, 6), device=device)
    target[0, 2:] = PAD
    return hidden, weight, target


def _compiled_and_plain(hidden, weight, target, autocast):
    """The projected loss through the compiled chunks (`fused`, training) and the plain logits
    path in float64: sums, and gradients for hidden and weight."""
    from transduce.training.loss import projected_label_smoothed_loss

    with autocast:
        compiled = projected_label_smoothed_loss(hidden, weight, target, 0.1, PAD, fused=True)
    got = torch.autograd.grad(compiled.loss * 0.5, [hidden, weight])
    exact_inputs = [t.detach().double().requires_grad_() for t in (hidden, weight)]
    logits = torch.nn.functional.linear(*exact_inputs)
    plain = label_smoothed_loss(logits, target, 0.1, PAD)
    expected = torch.autograd.grad(plain.loss * 0.5, exact_inputs)
    return compiled, plain, got, expected


def test_half_precision_training_takes_the_compiled_chunks_with_the_logits_path_sums(
    monkeypatch, compiled_calls
):
    """What a GPU's compiled training does (bfloat16 here, on the CPU): the loss in chunks
    through one compiled function per chunk, the sums and gradients of the logits path."""
    import transduce.training.loss as loss_module

    monkeypatch.setattr(loss_module, "COMPILED_CHUNK_LOGITS", 7 * 300)  # 3 chunks, one short
    loss_module._compiled_chunk_sums.cache_clear()
    hidden, weight, target = _projected_case("cpu", torch.bfloat16)
    compiled, plain, got, expected = _compiled_and_plain(hidden, weight, target, nullcontext())
    loss_module._compiled_chunk_sums.cache_clear()
    assert compiled_calls == [loss_module.chunk_sums_and_gradient] * 3
    assert compiled.n_tokens == plain.n_tokens == 14
    assert compiled.loss.item() == pytest.approx(plain.loss.item(), rel=1e-2)
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.dtype == torch.bfloat16
        torch.testing.assert_close(mine.double(), theirs, rtol=0.05, atol=0.02)
    assert (got[0][target == PAD] == 0).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_compiled_chunks_under_autocast_give_the_logits_path_loss():
    hidden, weight, target = _projected_case("cuda", torch.float32)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16)
    compiled, plain, got, expected = _compiled_and_plain(hidden, weight, target, autocast)
    assert compiled.loss.item() == pytest.approx(plain.loss.item(), rel=1e-2)
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine.double(), theirs, rtol=0.05, atol=0.02)


def test_compiled_layers_trace_whole_over_new_lengths(monkeypatch):
    """Over dynamic shapes no layer's graph breaks: a decoder's causal flag computed from its
    length was a symbolic bool, which the fused kernel refuses, and every decoder layer ran as two
    graphs around an eager attention (found on an H200, session 31). Lengths past the CPU's
    explicit-attention span, so the CPU takes the fused kernel as a GPU does."""
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda f, **o: real_compile(f, backend="eager", **o))
    torch._dynamo.reset()
    counters.clear()
    model = tiny_model(dtype=torch.float32).train()
    compile_layers(model)
    for length in (EXPLICIT_TRAINING_SPAN + 5, EXPLICIT_TRAINING_SPAN + 9):
        pairs = [([4 + i % 8 for i in range(length - 3)], [5] * length), ([6] * length, [7] * 9)]
        batch = collate(pairs, PAD, BOS, EOS)
        model_loss(model, batch, 0.1, PAD).loss.backward()
    assert counters["stats"]["unique_graphs"] >= 2  # the layers did go through the compiler
    assert dict(counters["graph_break"]) == {}
