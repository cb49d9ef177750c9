"""`transduce train`, `average` and `params`: the verbs of training and of a model's size."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from .common import add_config_arguments, config_from

logger = logging.getLogger("transduce")


def add_verbs(verbs) -> None:
    _add_train(verbs)
    _add_average(verbs)
    _add_params(verbs)


def _add_train(verbs) -> None:
    p = verbs.add_parser(
        "train",
        help="train a model on prepared data",
        description="Train a model (s5). Settings come from --preset (or with --init from the "
        "model to fine-tune), then --config FILE.yaml, then --set key=value, then the flags.",
    )
    p.add_argument("--data", type=Path, required=True, help="a folder made by `prepare`")
    add_config_arguments(p, default_preset="base")
    p.set_defaults(preset=None)  # base (config_from), unless --init brings the settings
    p.add_argument(
        "--init",
        type=Path,
        help="fine-tune: start from this model's weights and settings (a run folder or "
        "checkpoint), with a new optimiser and schedule; the data prepared with --vocab MODEL",
    )
    p.add_argument("--out", type=Path, required=True, help="the run folder")
    p.add_argument("--max-steps", type=int, help="= train.max_steps")
    p.add_argument("--max-minutes", type=float, help="= train.max_minutes")
    p.add_argument("--seed", type=int, help="= train.seed")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its newest good checkpoint (Ctrl-C or SIGTERM "
        "saves one after the current update, then stops)",
    )
    p.add_argument(
        "--members",
        type=int,
        default=1,
        help="train this many models at once (seeds train.seed, +1, ...; each its share of the "
        "CPU cores) into --out/member1 ...: decoding --out then takes their ensemble",
    )
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: a GPU if there is one)")
    p.set_defaults(run=_train)


def _train(args) -> None:
    from ..training.loop import train

    flags = {
        "train.max_steps": args.max_steps,
        "train.max_minutes": args.max_minutes,
        "train.seed": args.seed,
    }
    config = config_from(args, flags, start=_starting_settings(args))
    if args.members != 1:
        from ..training.members import train_members

        train_members(config, args.data, args.out, args.members, resume=args.resume,
                      device=args.device)  # fmt: skip
        return
    path = train(config, args.data, args.out, resume=args.resume, device=args.device)
    logger.info("done: %s", path)


def _starting_settings(args):
    """With --init, the saved model's settings are the run's start, not a preset's; resuming a
    run that began so, its own (the model it began from may be gone)."""
    from ..training import warm_start

    first = args.out / "member1" if args.members != 1 else args.out  # an ensemble's: its first's
    resumed = warm_start.settings_to_resume(first, args.init) if args.resume else None
    if args.init is None and resumed is None:
        return None
    if args.preset is not None:
        raise ValueError("fine-tuning takes the model's settings: --set changes them, not --preset")
    return resumed or warm_start.settings_to_fine_tune(args.init)


def _add_average(verbs) -> None:
    p = verbs.add_parser("average", help="average the last K checkpoints of a run")
    p.add_argument("--model", type=Path, required=True, help="the run folder")
    p.add_argument("--last", type=int, default=5, help="how many (the paper: 5 base, 20 big)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(run=_average)


def _average(args) -> None:
    from ..training.checkpoint import CheckpointStore, average, save

    if args.last < 1:
        raise ValueError(f"--last must be at least 1, got {args.last}")
    store = CheckpointStore(args.model, keep_last=args.last)
    if args.out.is_dir():
        raise ValueError(f"--out {args.out} is a folder; name the file to write")
    if args.out.resolve().parent == store.dir.resolve():  # e.g. over a step's own checkpoint
        raise ValueError(f"--out {args.out}: name a file outside the run's checkpoints/ folder")
    paths = store.last_paths(args.last)
    if not paths:
        raise FileNotFoundError(f"{args.model}: no checkpoints to average")
    if len(paths) < args.last:
        found = len(paths)
        logger.warning(
            "%s holds %d checkpoints: averaging those, not %d", args.model, found, args.last
        )
    save(average(paths), args.out)
    logger.info("averaged %s into %s", ", ".join(p.name for p in paths), args.out)


def _add_params(verbs) -> None:
    p = verbs.add_parser("params", help="print a preset's parameter count")
    add_config_arguments(p, default_preset=None)
    p.add_argument("--vocab-size", type=int, required=True)
    p.set_defaults(run=_params)


def _params(args) -> None:
    import torch

    from ..models import build_model, count_parameters

    config = config_from(args)
    with torch.device("meta"):  # shapes only: even `big` costs no memory
        model = build_model(config.model, _Shape(args.vocab_size))
    sys.stdout.write(f"{args.preset}: {config.model}\n{count_parameters(model)}\n")


class _Shape:
    """A vocabulary of `size` entries, for counting parameters without one."""

    def __init__(self, size: int):
        self.size, self.pad = size, 0
