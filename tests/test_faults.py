"""Scale-out and faults: two processes equal one, and a killed run resumes to the same end."""

import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import transduce.files as files
from transduce.cli import main
from transduce.cli import train as train_verbs
from transduce.config import Config, override, parse_assignments
from transduce.data.corpus import LengthFilter
from transduce.data.dataset import prepare
from transduce.models.transformer import Transformer
from transduce.presets import tiny
from transduce.training import distributed
from transduce.training.checkpoint import CheckpointStore, load
from transduce.training.loop import Trainer, train
from transduce.training.stopping import SIGNALS, StopRequests, TrainingStopped

from .conftest import PLUMBING_MODEL, as_set_arguments, reverse_task_files, wait_for_file

TOY = as_set_arguments(
    PLUMBING_MODEL
    | {
        "train.warmup_steps": 20,
        "train.lr_scale": 0.5,
        "train.log_every": 2,
        "train.keep_last": 3,
        "train.average_last": 2,
        "train.valid_bleu": "false",
        "train.threads": 1,
    }
)


# Two training processes on this machine, as `torchrun --nproc_per_node 2` starts them.
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
TORCHRUN += ["-m"]


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("faults")
    data = prepare(
        reverse_task_files(folder, n_train=1000),
        folder / "prepared",
        vocab_size=16,
        length_filter=LengthFilter(),
        description={"corpus": "toy"},
    )
    return data.path


def _train_command(
    data: Path, out: Path, *settings: str, launcher=(), preset="tiny", toy=TOY
) -> list[str]:
    return [
        *(launcher or [sys.executable, "-m"]),
        "transduce",
        "-q",
        "train",
        "--data",
        str(data),
        "--preset",
        preset,
        "--out",
        str(out),
        "--device",  # gloo on the CPU: the same on any machine, one GPU or none
        "cpu",
        "--set",
        *toy,
        *settings,
    ]


def _model(run: Path, step: int) -> dict:
    return load(CheckpointStore(run, 3).path(step))["model"]


@pytest.mark.slow
def test_two_processes_equal_one_process_with_twice_the_accumulation(toy_data, tmp_path):
    settings = ["train.max_steps=4", "train.valid_every=4", "model.dropout=0"]
    subprocess.run(
        _train_command(
            toy_data, tmp_path / "two", *settings, "train.accumulate=1", launcher=TORCHRUN
        ),
        check=True,
        timeout=300,
    )
    subprocess.run(
        _train_command(toy_data, tmp_path / "one", *settings, "train.accumulate=2"),
        check=True,
        timeout=300,
    )
    two, one = _model(tmp_path / "two", 4), _model(tmp_path / "one", 4)
    for name, tensor in one.items():
        # Sums of the same gradients in another order: equal to float tolerance, not bitwise.
        torch.testing.assert_close(two[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    # and both trained: the models are not the initial one they share
    state = load(CheckpointStore(tmp_path / "one", 3).path(4))
    torch.manual_seed(Config.from_dict(json.loads(state["config"])).train.seed)
    initial = Transformer(Config.from_dict(json.loads(state["config"])).model).state_dict()
    assert not torch.allclose(
        initial["decoder_layers.0.ffn.w_1.weight"],
        one["decoder_layers.0.ffn.w_1.weight"],
        atol=1e-4,
    )
    assert load(CheckpointStore(tmp_path / "two", 3).path(4))["progress"]["world"] == 2


RNN_TOY = as_set_arguments(
    {
        "model.n_layers": 1,
        "model.d_model": 16,
        "model.d_embed": 16,
        "model.dropout": 0.0,
        "data.max_tokens": 200,
        "train.plateau_patience": 1,  # the rate may halve within the run, on every process alike
        "train.log_every": 2,
        "train.keep_last": 3,
        "train.average_last": 2,
        "train.valid_bleu": "false",
        "train.threads": 1,
    }
)


@pytest.mark.slow
def test_the_recurrent_family_trains_on_two_processes_as_on_one(toy_data, tmp_path):
    settings = ["train.max_steps=4", "train.valid_every=1"]
    for name, accumulate, launcher in (("two", 1, TORCHRUN), ("one", 2, ())):
        command = _train_command(
            toy_data, tmp_path / name, *settings, f"train.accumulate={accumulate}",
            launcher=launcher, preset="rnn-tiny", toy=RNN_TOY,
        )  # fmt: skip
        subprocess.run(command, check=True, timeout=300)
    two, one = _model(tmp_path / "two", 4), _model(tmp_path / "one", 4)
    assert set(two) == set(one) and any("rnn" in name for name in one)
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
    states = [load(CheckpointStore(tmp_path / n, 3).path(4)) for n in ("two", "one")]
    assert states[0]["progress"]["world"] == 2
    assert states[0]["schedule"] == states[1]["schedule"]  # the plateau's state, rank 0's


def _with_a_second_process(monkeypatch, theirs: list[float], gathered: object = "theirs") -> list:
    """torch.distributed's collectives as if rank 1 took part holding `theirs` (and `gathered`
    for all_gather_object), in process: the torchrun tests above take minutes. Returns the names
    of the calls made."""
    calls = []

    def all_reduce(tensor, op=dist.ReduceOp.SUM):
        calls.append(f"all_reduce {op} {tensor.dtype}")
        other = torch.tensor(theirs[: tensor.numel()], dtype=tensor.dtype)
        combined = {dist.ReduceOp.SUM: torch.add, dist.ReduceOp.MAX: torch.maximum}[op]
        tensor.copy_(combined(tensor, other))

    def all_gather_object(values, value):
        calls.append("all_gather_object")
        values[:] = [value, gathered]

    monkeypatch.setattr(dist, "get_backend", lambda: "gloo")
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    monkeypatch.setattr(dist, "barrier", lambda: calls.append("barrier"))
    return calls


def test_processes_sum_in_float64_take_the_largest_value_and_gather_every_ones(monkeypatch):
    calls = _with_a_second_process(monkeypatch, [2.0**24, 1.0])
    pair = distributed.Processes(rank=0, world=2)
    # float32 would lose the 1 beside 2^24 (token counts) and the 2^-30 (loss sums)
    assert pair.sum([1.0, 2.0**-30]) == [2.0**24 + 1, 1.0 + 2.0**-30]
    assert pair.max(3.0) == 2.0**24  # a stop asked for on either process stops both
    assert pair.gather("mine") == ["mine", "theirs"]
    pair.barrier()
    assert calls == [
        f"all_reduce {dist.ReduceOp.SUM} {torch.float64}",
        f"all_reduce {dist.ReduceOp.MAX} {torch.float64}",
        "all_gather_object",
        "barrier",
    ]
    calls = _with_a_second_process(monkeypatch, [1.0])
    assert pair.max(3.0) == 3.0
    alone = distributed.Processes()
    assert alone.sum([1.5]) == [1.5] and alone.max(2.0) == 2.0 and alone.gather(7) == [7]
    alone.barrier()
    assert len(calls) == 1  # one process calls no collective
    assert pair.is_main and not distributed.Processes(rank=1, world=2).is_main


def test_work_only_the_main_process_does_stops_every_process_when_it_fails(monkeypatch):
    """Checkpoints and logs are written by rank 0 alone; its failure must not leave rank 1
    waiting at the next collective, nor be lost: each process raises, rank 0 its own error."""
    _with_a_second_process(monkeypatch, [], gathered=None)
    main = distributed.Processes(rank=0, world=2)
    assert main.on_main(lambda: 7) == 7

    def disk_full():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        main.on_main(disk_full)
    ran = []

    def all_gather_object(values, value):  # rank 0 shares its failure
        values[:] = ["disk full", value]

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    worker = distributed.Processes(rank=1, world=2)
    with pytest.raises(distributed.MainProcessFailed, match="the main process failed: disk full"):
        worker.on_main(lambda: ran.append("rank 1 wrote"))
    assert ran == []


def test_torchruns_environment_places_the_process_and_picks_the_backend(monkeypatch):
    joined = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", joined.append)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed.start("cpu") == distributed.Processes() and joined == []
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")  # the second machine's second process
    assert distributed.start("cuda") == distributed.Processes(rank=3, world=4, local_rank=1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("RANK", "0")
    assert distributed.start("cpu") == distributed.Processes(rank=0, world=2, local_rank=0)
    assert joined == ["nccl", "gloo"]  # NCCL between GPUs, gloo between CPU processes
    # NCCL reduces only tensors on this process's GPU
    monkeypatch.setattr(dist, "get_backend", lambda: "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert distributed._collective_device() == torch.device("cuda", 3)
    monkeypatch.setattr(dist, "get_backend", lambda: "gloo")
    assert distributed._collective_device() == torch.device("cpu")
    left = []
    monkeypatch.setattr(dist, "destroy_process_group", lambda: left.append("left"))
    distributed.stop()
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    distributed.stop()
    assert left == ["left"]  # the group is left once a run ends, if there is one


def test_a_run_frees_its_model_before_it_leaves_the_process_group(toy_data, tmp_path, monkeypatch):
    """DistributedDataParallel keeps gloo's threads alive; a Trainer in a reference cycle (torch's
    first imports make one) freed only at the interpreter's exit can abort the process there
    (a CI run: "terminate called without an active exception"). A real group of one process."""
    trainers, freed_on_leaving = [], []
    run = Trainer.run

    def run_in_a_cycle(self):
        self.itself = self  # the cycle, made here as the first imports would
        trainers.append(weakref.ref(self))
        return run(self)

    def one_process_group(device_type):
        store = dist.FileStore(str(tmp_path / "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        return distributed.Processes()

    leave = dist.destroy_process_group
    monkeypatch.setattr(Trainer, "run", run_in_a_cycle)
    monkeypatch.setattr(distributed, "start", one_process_group)
    monkeypatch.setattr(
        dist, "destroy_process_group", lambda: freed_on_leaving.append(trainers[0]() is None)
    )
    gc.disable()  # no collection but the one that `stop` asks for
    try:
        config = override(tiny(), parse_assignments([*TOY, "train.max_steps=2"]))
        train(config, toy_data, tmp_path / "run")
    finally:
        gc.enable()
        if dist.is_initialized():
            leave()
    assert freed_on_leaving == [True]


@pytest.mark.slow
def test_kill_9_then_resume_ends_bitwise_where_an_uninterrupted_run_does(toy_data, tmp_path):
    settings = ["train.max_steps=30", "train.valid_every=5", "model.dropout=0.3"]
    subprocess.run(
        _train_command(toy_data, tmp_path / "straight", *settings), check=True, timeout=300
    )
    killed = tmp_path / "killed"
    for kill_after in (10, 20):  # twice: each kill lands wherever the run happens to be
        process = subprocess.Popen(
            _train_command(toy_data, killed, *settings) + (["--resume"] if kill_after > 10 else [])
        )
        wait_for_file(killed / "checkpoints" / f"step_{kill_after:08d}.pt", process)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    subprocess.run(
        [*_train_command(toy_data, killed, *settings), "--resume"], check=True, timeout=300
    )
    straight, resumed = _model(tmp_path / "straight", 30), _model(killed, 30)
    for name, tensor in straight.items():
        assert torch.equal(tensor, resumed[name]), name
    assert CheckpointStore(killed, 3).steps()[-3:] == [20, 25, 30]  # no checkpoint lost


def test_a_death_while_writing_a_checkpoint_loses_nothing(toy_data, tmp_path, monkeypatch):
    """The process dies inside the atomic rename of a checkpoint; --resume falls back."""
    config = _toy_config("train.max_steps=12", "train.valid_every=4")
    train(config, toy_data, tmp_path / "straight", device="cpu")

    real_replace, calls = os.replace, {"n": 0}

    def dies_on_the_fourth_rename(src, dst):
        calls["n"] += Path(dst).parent.name == "checkpoints"
        if calls["n"] == 4:  # step 8's checkpoint file: steps 4 needed three (file, best, index)
            raise KeyboardInterrupt("killed while writing")
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", dies_on_the_fourth_rename)
    with pytest.raises(KeyboardInterrupt):
        train(config, toy_data, tmp_path / "killed", device="cpu")
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert CheckpointStore(tmp_path / "killed", 3).steps() == [4]
    assert not list((tmp_path / "killed" / "checkpoints").glob("step_00000008*"))
    train(config, toy_data, tmp_path / "killed", resume=True, device="cpu")
    straight, resumed = _model(tmp_path / "straight", 12), _model(tmp_path / "killed", 12)
    assert all(torch.equal(t, resumed[n]) for n, t in straight.items())


def _toy_config(*settings: str) -> Config:
    """TOY in process, with dropout: a resume must restore the random state too."""
    return override(tiny(), parse_assignments([*TOY, "model.dropout=0.3", *settings]))


def _signal_after(monkeypatch, step: int, *signals: int) -> None:
    """Each of `signals` reaches this process as update `step` ends."""
    real_update = Trainer._update

    def update_then_signal(self, group, rate):
        result = real_update(self, group, rate)
        if self.progress.step == step:
            for number in signals:
                os.kill(os.getpid(), number)
        return result

    monkeypatch.setattr(Trainer, "_update", update_then_signal)


def test_a_stop_request_is_logged_and_only_the_main_thread_listens(caplog):
    """Python lets only the main thread set handlers: training in another thread (a notebook's
    worker) still runs, and a signal there stops it at once. TrainingStopped is a
    KeyboardInterrupt, so a sweep running the training stops too."""
    stops, handlers = StopRequests(), [signal.getsignal(n) for n in SIGNALS]
    failed = []

    def listen_in_a_thread():
        try:
            with stops.listening():
                assert [signal.getsignal(n) for n in SIGNALS] == handlers
        except (ValueError, AssertionError) as error:
            failed.append(error)

    thread = threading.Thread(target=listen_in_a_thread)
    thread.start()
    thread.join()
    assert failed == []
    with caplog.at_level("WARNING", logger="transduce.training.stopping"), stops.listening():
        signal.raise_signal(signal.SIGTERM)
    assert stops.signal_name == "SIGTERM" and [signal.getsignal(n) for n in SIGNALS] == handlers
    assert "SIGTERM: finishing this update" in caplog.text and "again to stop now" in caplog.text
    assert issubclass(TrainingStopped, KeyboardInterrupt)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_run_saves_its_last_update_and_resumes_to_the_same_end(
    toy_data, tmp_path, monkeypatch, caplog, number
):
    """Ctrl-C or a scheduler's SIGTERM between validations: the update ends, its state is saved
    outside the rotation, and `--resume` ends bitwise where an uninterrupted run does, with the
    same checkpoints kept and averaged."""
    config = _toy_config("train.max_steps=16", "train.valid_every=4")
    train(config, toy_data, tmp_path / "straight", device="cpu")
    handlers = [signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)]
    _signal_after(monkeypatch, 7, number)
    with pytest.raises(TrainingStopped, match=f"{number.name} at step 7: saved .*stopped_00000007"):
        train(config, toy_data, tmp_path / "stopped", device="cpu")
    assert [signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)] == handlers
    store = CheckpointStore(tmp_path / "stopped", 3)
    assert store.steps() == [4] and store.stopped_steps() == [7]
    assert load(store.stopped_path(7))["progress"]["step"] == 7
    monkeypatch.undo()
    with caplog.at_level("INFO", logger="transduce.training.loop"):
        train(config, toy_data, tmp_path / "stopped", resume=True, device="cpu")
    assert "resumed from step 7 " in caplog.text
    straight = CheckpointStore(tmp_path / "straight", 3)
    assert store.steps() == straight.steps() and store.stopped_steps() == []
    for file in ("average.pt", "checkpoints/best.pt"):
        mine, theirs = (
            load(run / file)["model"] for run in (tmp_path / "stopped", tmp_path / "straight")
        )
        assert all(torch.equal(t, mine[n]) for n, t in theirs.items()), file


def test_a_run_stopped_at_its_last_update_is_validated_and_averaged_on_resume(
    toy_data, tmp_path, monkeypatch
):
    """A stop at the budget's last update, between validations (18 is no multiple of 4): the
    resume has no update left to do, yet must validate and save that step as the uninterrupted
    run does at its end, average it in and delete the stopped file."""
    config = _toy_config("train.max_steps=18", "train.valid_every=4")
    train(config, toy_data, tmp_path / "straight", device="cpu")
    _signal_after(monkeypatch, 18, signal.SIGTERM)
    with pytest.raises(TrainingStopped, match=r"at step 18: saved .*stopped_00000018"):
        train(config, toy_data, tmp_path / "stopped", device="cpu")
    monkeypatch.undo()
    train(config, toy_data, tmp_path / "stopped", resume=True, device="cpu")
    store, straight = (CheckpointStore(tmp_path / run, 3) for run in ("stopped", "straight"))
    assert store.steps() == straight.steps() == [12, 16, 18] and store.stopped_steps() == []
    mine, theirs = (load(tmp_path / run / "average.pt")["model"] for run in ("stopped", "straight"))
    assert all(torch.equal(t, mine[n]) for n, t in theirs.items())


def test_a_stop_asked_for_at_a_validation_keeps_that_checkpoint(toy_data, tmp_path, monkeypatch):
    _signal_after(monkeypatch, 4, signal.SIGINT)
    with pytest.raises(TrainingStopped, match=r"at step 4: saved .*step_00000004\.pt"):
        train(
            _toy_config("train.max_steps=8", "train.valid_every=4"),
            toy_data,
            tmp_path,
            device="cpu",
        )
    assert CheckpointStore(tmp_path, 3).steps() == [4]
    assert CheckpointStore(tmp_path, 3).stopped_steps() == []


def test_a_second_signal_stops_at_once(toy_data, tmp_path, monkeypatch):
    _signal_after(monkeypatch, 6, signal.SIGINT, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="SIGINT twice") as stop:
        train(
            _toy_config("train.max_steps=8", "train.valid_every=4"),
            toy_data,
            tmp_path,
            device="cpu",
        )
    assert not isinstance(stop.value, TrainingStopped)
    store = CheckpointStore(tmp_path, 3)
    assert store.steps() == [4] and store.stopped_steps() == []


PAIR = ["train.max_steps=40", "train.valid_every=10", "model.dropout=0.3"]


@pytest.fixture(scope="module")
def straight_pair(toy_data, tmp_path_factory) -> dict:
    """The final model of two processes trained with PAIR without a stop."""
    run = tmp_path_factory.mktemp("pair") / "straight"
    subprocess.run(_train_command(toy_data, run, *PAIR, launcher=TORCHRUN), check=True, timeout=300)
    return _model(run, 40)


@pytest.mark.slow
@pytest.mark.parametrize(
    "whom, number", [("one worker", signal.SIGTERM), ("torchrun", signal.SIGINT)]
)
def test_a_signal_to_one_or_all_of_two_processes_stops_both_after_the_same_update(
    toy_data, tmp_path, straight_pair, whom, number
):
    """Whichever process a signal reaches (a scheduler may signal one; Ctrl-C reaches torchrun,
    which passes it on to each), all stop after the same update and the first one saves; the
    resumed pair ends where an uninterrupted pair does."""
    command = _train_command(toy_data, tmp_path, *PAIR, launcher=TORCHRUN)
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    wait_for_file(tmp_path / "checkpoints" / "step_00000010.pt", process)
    # Into the updates after that validation: a second was enough for a fast host to train all
    # 30 of them (fused Adam, session 51), so the signal goes at once; one that lands before the
    # next update stops at step 10, whose checkpoint stands (the branch below).
    time.sleep(0.1)
    workers = _children(process.pid)
    assert len(workers) == 2
    os.kill(workers[-1] if whom == "one worker" else process.pid, number)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0, stderr
    found = re.search(rf"interrupted: {number.name} at step (\d+): saved", stderr)
    assert stderr.count("transduce train: interrupted") == 1, stderr  # the main process says it
    step, store = int(found.group(1)), CheckpointStore(tmp_path, 3)
    if step % 10:  # between validations (the usual case), else its step checkpoint stands
        assert store.stopped_steps() == [step], stderr
        state = load(store.stopped_path(step))
        assert state["progress"]["world"] == 2 and len(state["rng"]) == 2
    assert step < 40 and store.steps()[-1] == step // 10 * 10
    again = subprocess.run([*command, "--resume"], stderr=subprocess.PIPE, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "batches differ" not in again.stderr  # each rank meets the batches it was cut with
    resumed = _model(tmp_path, 40)
    assert all(torch.equal(t, resumed[n]) for n, t in straight_pair.items())


@pytest.mark.parametrize("speaks", [True, False])
def test_only_the_process_that_speaks_for_a_stopped_run_prints_its_message(monkeypatch, speaks):
    """Under torchrun every process stops; the main one names the saved file, the others exit
    as failed without repeating it."""

    def stopped(args):
        raise TrainingStopped("SIGINT at step 3: saved x", speaks=speaks)

    monkeypatch.setattr(train_verbs, "_train", stopped)
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--data", "d", "--out", "o"])
    said = "transduce train: interrupted: SIGINT at step 3: saved x"
    assert exit_.value.code == (said if speaks else 1)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, oldest first (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            found.append((int(fields[19]), int(stat.parent.name)))
    return [child for _, child in sorted(found)]
