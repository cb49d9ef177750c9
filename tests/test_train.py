"""The training loop end to end on a toy reverse task: learning, resume, checkpoints, failures."""

import math
import subprocess
import sys
import threading
from contextlib import nullcontext

import numpy as np
import pytest
import torch

from transduce.config import override
from transduce.data.batching import collate
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator
from transduce.presets import tiny
from transduce.tasks import get_task
from transduce.training import loop, validation
from transduce.training.checkpoint import CheckpointStore, load, steps_to_average
from transduce.training.loop import Trainer, TrainingError, train
from transduce.training.loss import label_smoothed_loss
from transduce.training.runlog import read_log, read_run_config
from transduce.training.validation import dev_loss

from .conftest import LEARNER_MODEL, prepared_reverse_task

TOY = LEARNER_MODEL | {
    "train.valid_every": 20,
    "train.log_every": 10,
    "train.keep_last": 3,
    "train.average_last": 2,
    "train.max_steps": 40,
    "train.cooldown": 0.0,  # a resumed run may change its budget, and the cooldown with it
}


def toy_config(**changes):
    return override(override(tiny(), TOY), changes)


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    return prepared_reverse_task(tmp_path_factory.mktemp("toy"))


def _trainer(config, data_path, run_dir, resume=False):
    return Trainer(config, PreparedData.load(data_path), run_dir, resume, torch.device("cpu"))


@pytest.mark.slow
def test_a_tiny_model_learns_to_reverse(toy_data, tmp_path, monkeypatch):
    # 1,200 updates: at 800 the model stood at the threshold on some CPUs' float32 products (0.95
    # of the test exact through oneDNN, 0.7 through MKL on an AMD EPYC of Zen 4; 0.95-0.975 both
    # at 1,200), which a route's other rounding could tip
    config = toy_config(**{"train.max_steps": 1200, "train.valid_every": 100})
    train(config, toy_data, tmp_path / "run")
    data = PreparedData.load(toy_data)
    test = data.text("test")
    cpu = Translator.load(tmp_path / "run", device="cpu")  # where int8 runs, for the comparison
    outputs = [h[0][0] for h in cpu.translate(test.src)]
    exact = sum(o == t for o, t in zip(outputs, test.tgt, strict=True)) / len(outputs)
    assert exact >= 0.8, list(zip(outputs, test.tgt, strict=True))[:5]
    assert (tmp_path / "run" / "curve.png").stat().st_size > 0
    # int8 decoding (translate --int8) keeps what the model learned, every product in int8
    monkeypatch.setattr("transduce.models.int8.MIN_MULTIPLY_ADDS", 0)
    int8 = Translator.load(tmp_path / "run", device="cpu", int8=True)
    outputs_int8 = [h[0][0] for h in int8.translate(test.src)]
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in int8.model.modules())
    # the decoder's self-attention Q, K, V as one stacked product, and the tied output projection
    n_decoder = len(int8.model.decoder_layers)
    assert len(int8.int8_weights) == n_linear - 2 * n_decoder + 1
    same = sum(a == b for a, b in zip(outputs, outputs_int8, strict=True)) / len(outputs)
    assert same >= 0.9


def test_the_loop_hands_its_gradients_to_one_fused_adam_step_on_a_cpu(toy_data, tmp_path):
    """PyTorch's default steps a CPU's parameters one by one (20 ms at `small`, fused 7 ms)."""
    trainer = _trainer(toy_config(), toy_data, tmp_path / "run")
    assert trainer.optimizer.defaults["fused"]
    params = [p for group in trainer.optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in params} == {id(p) for p in trainer.model.parameters()}
    steps = []
    trainer.optimizer.register_step_post_hook(lambda opt, *_: steps.append(opt.defaults["fused"]))
    trainer._update([next(iter(trainer.epochs.batches(0)))], rate=1e-3)
    assert steps == [True]


def test_a_validation_after_an_update_scores_the_updated_weights(toy_data, tmp_path):
    """Validation keeps copies of weights between calls (attention's stacked projections); the
    update between two validations must reach them, as it reaches a model built afresh."""
    from transduce.models import build_model

    trainer = _trainer(toy_config(), toy_data, tmp_path / "run")
    afresh = build_model(trainer.config.model, trainer.vocab)
    data, cpu = PreparedData.load(toy_data), torch.device("cpu")
    batches = iter(trainer.epochs.batches(0))
    for _ in range(2):
        trainer._update([next(batches)], rate=1e-3)
        kept = dev_loss(trainer.model, data, trainer.config, cpu, nullcontext)
        afresh.load_state_dict(trainer.model.state_dict())  # its copies made anew
        fresh = dev_loss(afresh, data, trainer.config, cpu, nullcontext)
        assert kept["loss"] == pytest.approx(fresh["loss"], rel=1e-6)


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(toy_data, tmp_path):
    config = toy_config(**{"model.dropout": 0.3})  # dropout: the random state must be restored
    _trainer(config, toy_data, tmp_path / "straight").run()
    _trainer(
        toy_config(**{"model.dropout": 0.3, "train.max_steps": 20}), toy_data, tmp_path / "stopped"
    ).run()
    _trainer(config, toy_data, tmp_path / "stopped", resume=True).run()
    straight = load(CheckpointStore(tmp_path / "straight", 3).path(40))
    resumed = load(CheckpointStore(tmp_path / "stopped", 3).path(40))
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name  # bitwise on a CPU
    assert straight["progress"] == resumed["progress"] | {
        "elapsed": straight["progress"]["elapsed"]
    }


def test_a_failed_validation_keeps_its_updates_and_resume_redoes_it(
    toy_data, tmp_path, monkeypatch
):
    """A validation that fails (say, the dev decoding out of memory) saves the state it was
    validating; `--resume` validates that first, then ends as an uninterrupted run does."""
    config = toy_config(**{"model.dropout": 0.3, "train.valid_every": 10, "train.max_steps": 30})
    _trainer(config, toy_data, tmp_path / "straight").run()
    real, calls = loop.validate, {"n": 0}

    def the_second_fails(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("out of memory in the dev decoding")
        return real(*args)

    monkeypatch.setattr(loop, "validate", the_second_fails)
    with pytest.raises(
        TrainingError,
        match=r"validation at step 20 failed \(RuntimeError: out of memory in the dev decoding\)"
        r"; the model is saved in .*stopped_00000020\.pt: .* --resume validates it",
    ):
        _trainer(config, toy_data, tmp_path / "failed").run()
    store = CheckpointStore(tmp_path / "failed", 3)
    assert store.steps() == [10] and store.stopped_steps() == [20]
    monkeypatch.undo()
    resumed = _trainer(config, toy_data, tmp_path / "failed", resume=True)
    assert resumed.progress.step == 20
    resumed.run()
    valid = [r["step"] for r in read_log(tmp_path / "failed" / "log.jsonl") if r["kind"] == "valid"]
    assert valid == [10, 20, 30] and store.stopped_steps() == []
    assert store.steps() == CheckpointStore(tmp_path / "straight", 3).steps()
    for file in ("checkpoints/step_00000030.pt", "checkpoints/best.pt", "average.pt"):
        straight, redone = (
            load(run / file) for run in (tmp_path / "straight", tmp_path / "failed")
        )
        assert all(torch.equal(t, redone["model"][n]) for n, t in straight["model"].items()), file
        assert straight["schedule"] == redone["schedule"]


def test_a_resumed_run_logs_each_step_once_after_a_kill(toy_data, tmp_path):
    """What a killed session logged after its newest checkpoint is redone on `--resume`: the log
    forgets it, so that each update and validation is logged once, in order."""
    config = toy_config(**{"train.max_steps": 20, "train.valid_every": 10, "train.log_every": 2})
    run_dir = tmp_path / "run"
    _trainer(config, toy_data, run_dir).run()
    store = CheckpointStore(run_dir, 3)
    store.path(20).unlink()  # killed after logging to step 20, before its checkpoint
    _trainer(config, toy_data, run_dir, resume=True).run()
    records = read_log(run_dir / "log.jsonl")
    for kind in ("train", "valid"):
        steps = [r["step"] for r in records if r["kind"] == kind]
        assert steps == sorted(set(steps)) and steps[-1] == 20, kind


def test_a_saved_model_loads_with_identical_outputs(toy_data, tmp_path):
    trainer = _trainer(toy_config(**{"train.max_steps": 20}), toy_data, tmp_path / "run")
    trainer.run()
    store = CheckpointStore(tmp_path / "run", 3)
    loaded = Translator.load(tmp_path / "run", checkpoint=store.path(20), device="cpu").model
    src = torch.tensor([[4, 5, 6, 3]])
    tgt = torch.tensor([[2, 6, 5]])
    trainer.model.eval()
    assert torch.equal(loaded(src, tgt), trainer.model(src, tgt))


def test_resume_with_a_different_model_is_refused(toy_data, tmp_path):
    _trainer(toy_config(**{"train.max_steps": 10}), toy_data, tmp_path / "run").run()
    with pytest.raises(TrainingError, match=r"different configuration \(model\.d_ff \d+ -> 128\)"):
        _trainer(toy_config(**{"model.d_ff": 128}), toy_data, tmp_path / "run", resume=True)
    # only when to stop may change: the schedule, say, may not
    only_limits = r"only train\.max_steps, max_epochs, max_minutes and threads may change"
    for change in ({"train.lr_scale": 2.0}, {"train.warmup_steps": 99}, {"data.max_tokens": 99}):
        with pytest.raises(TrainingError, match=only_limits):
            _trainer(toy_config(**change), toy_data, tmp_path / "run", resume=True)
    threads = torch.get_num_threads()  # a change from 0 (the default) that leaves this process
    longer = toy_config(**{"train.max_steps": 12, "train.max_epochs": 50, "train.max_minutes": 9,
                           "train.threads": threads})  # fmt: skip
    _trainer(longer, toy_data, tmp_path / "run", resume=True)
    assert read_run_config(tmp_path / "run")[1].train.threads == threads  # kept for the next
    with pytest.raises(TrainingError, match="already holds a run"):
        _trainer(toy_config(), toy_data, tmp_path / "run")


def _held_by_another_process(folder):
    """A process holding `folder` as a training run does (flock), by the OS's own calls."""
    code = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(300)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"held\n"
    return holder


def test_a_second_training_into_a_folder_in_use_is_refused_and_touches_nothing(toy_data, tmp_path):
    """The same `--resume` typed in two terminals: the second is refused before it writes, for it
    would delete the first's checkpoint in flight and cut its log; the first one killed, the
    folder is free again (the kernel drops the lock: nothing stale to clear by hand)."""
    run = tmp_path / "run"
    train(toy_config(**{"train.max_steps": 10}), toy_data, run)
    in_flight = run / "checkpoints" / ".step_00000020.pt.x1y2z3.tmp"  # the first one's write
    in_flight.write_bytes(b"half written")
    log = (run / "log.jsonl").read_text()
    holder = _held_by_another_process(run)
    try:
        with pytest.raises(TrainingError, match="another process is training into this folder"):
            train(toy_config(**{"train.max_steps": 20}), toy_data, run, resume=True)
        assert in_flight.exists() and (run / "log.jsonl").read_text() == log
    finally:
        holder.kill()
        holder.wait()
    train(toy_config(**{"train.max_steps": 20}), toy_data, run, resume=True)
    assert not in_flight.exists() and 20 in CheckpointStore(run, 3).steps()


def test_a_training_that_fails_lets_go_of_its_folder(toy_data, tmp_path):
    """A refused resume, corrected and run again in the same process (a notebook), finds the
    folder free, though the failure's traceback still holds the first call's frames."""
    run = tmp_path / "run"
    train(toy_config(**{"train.max_steps": 10}), toy_data, run)
    with pytest.raises(TrainingError, match="different configuration") as refused:
        train(toy_config(**{"model.d_ff": 128}), toy_data, run, resume=True)
    train(toy_config(**{"train.max_steps": 20}), toy_data, run, resume=True)
    assert refused.traceback  # kept alive to here


def test_an_unwritable_run_folder_is_refused_before_training(toy_data, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(TrainingError, match="cannot write"):
        _trainer(toy_config(), toy_data, tmp_path / "file" / "run")


def test_a_non_finite_loss_skips_the_update(toy_data, tmp_path, monkeypatch):
    import transduce.training.step as train_module

    real = train_module.model_loss
    calls = {"n": 0}

    def sometimes_nan(*args):
        calls["n"] += 1
        sums = real(*args)
        if calls["n"] == 3:  # the third batch
            sums.loss = sums.loss * math.nan
        return sums

    monkeypatch.setattr(train_module, "model_loss", sometimes_nan)
    trainer = _trainer(
        toy_config(**{"train.max_steps": 5, "train.valid_every": 100}), toy_data, tmp_path / "run"
    )
    trainer.run()
    assert trainer.progress.bad_steps == 1
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_only_non_finite_losses_in_a_row_stop_a_run(toy_data, tmp_path, monkeypatch):
    """A bad update now and then (every other one here, more than `MAX_BAD_STEPS` in all) is
    skipped each time and the run goes on: a good update starts the count again."""
    import transduce.training.step as train_module

    real, calls = train_module.model_loss, {"n": 0}

    def every_other_nan(*args):
        calls["n"] += 1
        sums = real(*args)
        if calls["n"] % 2:
            sums.loss = sums.loss * math.nan
        return sums

    monkeypatch.setattr(train_module, "model_loss", every_other_nan)
    steps = 2 * loop.MAX_BAD_STEPS + 2
    config = toy_config(**{"train.max_steps": steps, "train.valid_every": 100})
    trainer = _trainer(config, toy_data, tmp_path / "run")
    trainer.run()
    assert trainer.progress.step == steps and trainer.progress.bad_steps == steps // 2


def test_a_run_that_keeps_diverging_stops_with_a_clear_message(toy_data, tmp_path, monkeypatch):
    import transduce.training.step as train_module

    real = train_module.model_loss

    def always_nan(*args):
        sums = real(*args)
        sums.loss = sums.loss * math.nan
        return sums

    monkeypatch.setattr(train_module, "model_loss", always_nan)
    threads = set(threading.enumerate())
    trainer = _trainer(toy_config(**{"train.valid_every": 100}), toy_data, tmp_path / "run")
    with pytest.raises(TrainingError, match="non-finite losses in a row"):
        trainer.run()
    assert trainer.progress.bad_steps == loop.MAX_BAD_STEPS  # the first time it is reached
    left = set(threading.enumerate()) - threads  # the log closed: its TensorBoard writer too
    # tqdm's monitor is one per process and ends by itself within its interval once no bar is open.
    assert [thread.name for thread in left if thread.name != "tqdm_monitor"] == []


def test_no_batch_that_fits_is_an_error_not_a_hang(toy_data, tmp_path):
    with pytest.raises(TrainingError, match=r"no training batch.*data\.max_tokens"):
        _trainer(toy_config(**{"data.max_tokens": 2}), toy_data, tmp_path / "run")


def test_resuming_a_finished_run_trains_no_further(toy_data, tmp_path):
    _trainer(toy_config(**{"train.max_steps": 20}), toy_data, tmp_path / "run").run()
    before = CheckpointStore(tmp_path / "run", 3).steps()
    resumed = _trainer(toy_config(**{"train.max_steps": 20}), toy_data, tmp_path / "run", True)
    resumed.run()
    assert resumed.progress.step == 20
    assert CheckpointStore(tmp_path / "run", 3).steps() == before
    epochs = toy_config(**{"train.max_steps": 10**6, "train.max_epochs": 1})
    _trainer(epochs, toy_data, tmp_path / "epochs").run()
    again = _trainer(epochs, toy_data, tmp_path / "epochs", resume=True)
    step = again.progress.step
    again.run()
    assert again.progress.step == step  # not one more epoch


def test_accumulating_two_batches_equals_one_merged_batch(toy_data, tmp_path):
    config = toy_config(**{"train.accumulate": 2})
    first = _trainer(config, toy_data, tmp_path / "a")
    second = _trainer(config, toy_data, tmp_path / "b")
    for trainer in (first, second):  # keep the gradients: compare them, not Adam's steps
        trainer.optimizer.step = trainer.optimizer.zero_grad = lambda *args, **kwargs: None
    a, b = list(first.epochs.batches(0))[:2]
    first._update([a, b], rate=1e-3)
    second._update([a + b], rate=1e-3)  # one batch, more padding: the same tokens and the same loss
    pairs = zip(first.model.named_parameters(), second.model.parameters(), strict=True)
    for (name, p), q in pairs:
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_dev_loss_scores_pairs_longer_than_the_batch_budget(toy_data):
    data = PreparedData.load(toy_data)
    model = _trainer(toy_config(), toy_data, toy_data.parent / "dev-run").model
    small = toy_config(**{"data.max_tokens": 4})
    large = toy_config()
    cpu = torch.device("cpu")
    assert dev_loss(model, data, small, cpu, nullcontext) == pytest.approx(
        dev_loss(model, data, large, cpu, nullcontext)
    )


def test_dev_loss_is_the_label_smoothed_mean_per_target_token_and_ppl_that_of_the_nll(toy_data):
    data, config = PreparedData.load(toy_data), toy_config(**{"train.label_smoothing": 0.2})
    model = _trainer(config, toy_data, toy_data.parent / "dev-loss-run").model.eval()
    split, vocab = data.split("dev"), data.vocab
    batch = collate(split.pairs(list(range(len(split)))), vocab.pad, vocab.bos, vocab.eos)
    with torch.no_grad():
        sums = label_smoothed_loss(model(batch.src, batch.tgt_in), batch.tgt_out, 0.2, vocab.pad)
    got = dev_loss(model.train(), data, config, torch.device("cpu"), nullcontext)
    assert got["loss"] == pytest.approx(sums.loss.item() / sums.n_tokens, rel=1e-5)
    assert got["nll"] == pytest.approx(sums.nll.item() / sums.n_tokens, rel=1e-5)
    assert got["ppl"] == pytest.approx(math.exp(got["nll"]))
    assert got["loss"] != pytest.approx(got["nll"])
    data._splits["dev"] = split.from_sequences([], [], np.zeros(0))  # prepared before the check
    with pytest.raises(ValueError, match="the dev split has no pairs to score"):
        dev_loss(model, data, config, torch.device("cpu"), nullcontext)


def test_the_dev_score_decodes_with_the_validation_beam_and_scores_every_line(
    toy_data, monkeypatch
):
    """In batches of as many hypotheses as the decode settings' beam search holds: 6 sentences
    x beam 5 = 30 hypotheses, 10 sentences of beam 3 (greedy's products were short at 64)."""
    data = PreparedData.load(toy_data)
    settings = {"train.valid_beam": 3, "decode.beam_size": 5, "decode.n_best": 2}
    config = toy_config(**settings, **{"decode.batch_size": 6})
    model = _trainer(config, toy_data, toy_data.parent / "dev-score-run").model
    calls, real = [], validation.decode_ids

    def decode_ids(model, vocab, sources, decode, device):
        calls.append((len(sources), decode.beam_size, decode.n_best, decode.batch_size))
        return real(model, vocab, sources, decode, device)

    monkeypatch.setattr(validation, "decode_ids", decode_ids)
    score = validation.dev_score(model, data, config, torch.device("cpu"), get_task(config.task))
    assert calls == [(len(data.split("dev")), 3, 1, 10)]
    assert 0 <= score <= 100
    one_at_a_time = toy_config(**(settings | {"decode.batch_size": 1, "decode.beam_size": 3}))
    task = get_task(config.task)
    assert validation.dev_score(model, data, one_at_a_time, torch.device("cpu"), task) == score
    assert calls[-1] == (len(data.split("dev")), 3, 1, 1)


def test_a_fresh_run_starts_a_fresh_log(toy_data, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "log.jsonl").write_text('{"kind": "train", "step": 999, "loss": 1}\n')
    _trainer(toy_config(**{"train.max_steps": 10}), toy_data, run_dir).run()
    steps = [r["step"] for r in read_log(run_dir / "log.jsonl")]
    assert 999 not in steps and steps == sorted(steps)


def test_a_nearly_full_disk_is_refused_before_training(toy_data, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 10**6, 10**6))
    with pytest.raises(TrainingError, match="MiB free"):
        _trainer(toy_config(), toy_data, tmp_path / "run")


def test_running_out_of_gpu_memory_names_the_settings_to_change(toy_data, tmp_path, monkeypatch):
    trainer = _trainer(toy_config(), toy_data, tmp_path / "run")

    class OutOfMemory(torch.nn.Module):
        def forward(self, *args):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(trainer, "network", OutOfMemory())
    with pytest.raises(TrainingError, match=r"data\.max_tokens=400.*train\.accumulate"):
        trainer.run()


def test_the_final_average_leaves_out_checkpoints_from_the_warmup(toy_data, tmp_path):
    config = toy_config(
        **{"train.max_steps": 100, "train.keep_last": 10, "train.average_last": 10}
    )  # warmup 60, a checkpoint every 20
    _trainer(config, toy_data, tmp_path / "run").run()
    averaged = load(tmp_path / "run" / "average.pt")["averaged_from"]
    assert [int(p.split("step_")[1][:8]) for p in averaged] == [60, 80, 100]
    short = toy_config(**{"train.max_steps": 40, "train.keep_last": 10, "train.average_last": 10})
    _trainer(short, toy_data, tmp_path / "short").run()  # ends inside the warmup
    (newest,) = load(tmp_path / "short" / "average.pt")["averaged_from"]  # the newest alone
    assert int(newest.split("step_")[1][:8]) == 40


def test_steps_to_average_for_a_run_stopped_earlier_ignores_later_checkpoints():
    # time_to_quality.py --averaged asks, of a finished run's checkpoints, what a run stopped at
    # an earlier update would have averaged: checkpoints after that update do not exist for it.
    settings = {"train.keep_last": 20, "train.average_last": 20, "train.warmup_steps": 2000}
    train = override(tiny(), settings).train
    kept = list(range(250, 6001, 250))
    assert steps_to_average(kept, 3000, train) == list(range(2000, 3001, 250))
    assert steps_to_average(kept, 5000, train) == list(range(2500, 5001, 250))  # second half
    assert steps_to_average(kept, 1000, train) == [1000]  # inside the warmup: the newest alone


def test_the_final_average_takes_only_the_second_half_of_a_short_run(toy_data, tmp_path):
    config = toy_config(
        **{
            "train.max_steps": 100,
            "train.warmup_steps": 10,
            "train.keep_last": 10,
            "train.average_last": 10,
        }
    )  # a checkpoint every 20, all past the warmup; the run's second half starts at 50
    _trainer(config, toy_data, tmp_path / "run").run()
    averaged = load(tmp_path / "run" / "average.pt")["averaged_from"]
    assert [int(p.split("step_")[1][:8]) for p in averaged] == [60, 80, 100]


def test_learned_positions_too_few_for_the_data_are_refused_before_the_run_starts(
    toy_data, tmp_path
):
    """A table of learned positions shorter than the longest sentence failed at the first batch
    that held one, minutes into the run: now refused at once, with the size that fits, and
    nothing written."""
    from transduce.config import ConfigError

    data = PreparedData.load(toy_data)
    longest = max(
        int(max(data.split(name).src_lengths.max(), data.split(name).tgt_lengths.max()))
        for name in ("train", "dev")
    )
    learned = {"model.positions": "learned", "model.max_positions": longest}
    with pytest.raises(ConfigError, match=f"set model.max_positions={longest + 1} or more"):
        _trainer(toy_config(**learned), toy_data, tmp_path / "short")
    assert not (tmp_path / "short").exists()
    fits = toy_config(**learned | {"model.max_positions": longest + 1, "train.max_steps": 2})
    _trainer(fits, toy_data, tmp_path / "fits").run()  # trains, and scores every dev pair


def test_a_resume_takes_back_a_checkpoint_a_kill_left_out_of_the_index(toy_data, tmp_path):
    """The run's writer recovers the store before it resumes: a step file missing from
    index.json is indexed again, and a killed write's temporary file is deleted."""
    import json

    run = tmp_path / "run"
    _trainer(toy_config(**{"train.max_steps": 40}), toy_data, run).run()
    index_path = run / "checkpoints" / "index.json"
    index = json.loads(index_path.read_text())
    last = index["steps"].pop()["step"]
    index_path.write_text(json.dumps(index))
    leftover = run / "checkpoints" / f".step_{last + 20:08d}.pt.k1ll3d.tmp"
    leftover.write_bytes(b"half")
    _trainer(toy_config(**{"train.max_steps": 40}), toy_data, run, resume=True)
    assert last in [entry["step"] for entry in json.loads(index_path.read_text())["steps"]]
    assert not leftover.exists()
