"""`transduce demo` (the whole pipeline on Multi30k), `compare` (Transformer against RNN) and
`sweep` (Table 3)."""

from __future__ import annotations

from pathlib import Path

from .common import add_set_argument, env_path


def add_verbs(verbs) -> None:
    _add_demo(verbs)
    _add_compare(verbs)
    _add_sweep(verbs)


def _add_demo(verbs) -> None:
    p = verbs.add_parser(
        "demo",
        help="prepare Multi30k en-de, train, translate, score",
        description="The whole pipeline on Multi30k: prepare, train --preset (demo: tiny with "
        "a schedule sized to ten minutes) for --minutes, average, translate the 2016 test set, "
        "score it.",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=env_path("TRANSDUCE_DATA"),
        help="folder holding multi30k/ (default $TRANSDUCE_DATA; else download)",
    )
    p.add_argument("--out", type=Path, default=Path("demo"), help="where everything goes")
    p.add_argument("--minutes", type=float, default=10.0, help="training time")
    p.add_argument(
        "--preset",
        help="what to train (default: demo, a schedule sized to ten minutes, up to 20 "
        "--minutes; tiny beyond)",
    )
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--variant", default="tok", choices=["raw", "tok"])
    add_set_argument(p)
    p.add_argument("--device")
    p.set_defaults(run=_demo)


def _add_compare(verbs) -> None:
    p = verbs.add_parser(
        "compare",
        help="the Transformer against the LSTM with attention, same data and wall time",
        description="Train the Transformer preset and the recurrent preset of about its size "
        "(tiny: tiny vs rnn-tiny; small: small vs rnn-small) for the same minutes with each "
        "seed, on the same prepared data, then translate the test set with the same search. "
        "Writes results.md / results.json and curve.png (dev BLEU against minutes) to --out. "
        "Runs resume; finished runs are not trained again.",
    )
    p.add_argument("--data", type=Path, required=True, help="a folder made by `prepare`")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--minutes", type=float, required=True, help="training time of each run")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--size", choices=["tiny", "small"], default="tiny")
    p.add_argument("--device")
    p.set_defaults(run=_compare)


def _add_sweep(verbs) -> None:
    p = verbs.add_parser(
        "sweep",
        help="Table 3: each row of (A)-(E) and big, scaled to a base preset, trained and scored",
        description="Train each row of Table 3, scaled to --base (a row changes what the paper's "
        "row changes, relative to the base), with seeds 1..--seeds, for --steps updates or "
        "--minutes each (big: 3x); score dev perplexity and dev BLEU (beam search, the last "
        "checkpoint). Writes table3.md / .csv / .json to --out after every run. Runs resume; "
        "finished runs are not trained again; a failed run is reported and the others go on. "
        "--params-only prints the parameter counts against the paper's and trains nothing.",
    )
    p.add_argument("--data", type=Path, help="a folder made by `prepare`")
    p.add_argument("--base", default="base", help="the preset the rows are scaled to")
    p.add_argument(
        "--rows", default="table3", help="table3 (every row), or names such as base,A1,E1"
    )
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument(
        "--one-seed-beyond",
        type=float,
        metavar="BLEU",
        help="a row whose first seed scores at least this far from the base's mean keeps one seed",
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, help="training time of each run")
    budget.add_argument("--steps", type=int, help="updates of each run")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs trained at once, each in a process of its own with train.threads threads",
    )
    p.add_argument("--out", type=Path, help="default runs/table3-BASE")
    add_set_argument(p, "onto the base")
    p.add_argument("--device")
    p.add_argument("--params-only", action="store_true", help="print parameter counts only")
    p.add_argument("--vocab-size", type=int, help="with --params-only: the vocabulary's size")
    p.set_defaults(run=_sweep)


def _sweep(args) -> None:
    import shlex
    import sys

    from ..experiments.sweep import sweep, sweep_base
    from ..experiments.table3 import ROW_NAMES, params_table

    rows = ROW_NAMES if args.rows == "table3" else tuple(args.rows.split(","))
    base = sweep_base(args.base, minutes=args.minutes, steps=args.steps, assignments=args.set)
    if args.params_only:
        if not args.vocab_size:
            raise ValueError("--params-only needs --vocab-size")
        sys.stdout.write(params_table(base, args.vocab_size, rows))
        return
    if args.data is None:
        raise ValueError("--data is required unless --params-only")
    out = args.out or Path("runs") / f"table3-{args.base}"
    command = "transduce " + shlex.join(sys.argv[1:])
    sweep(args.data, out, base, rows=rows, seeds=args.seeds, device=args.device, jobs=args.jobs,
          one_seed_beyond=args.one_seed_beyond, description=f"`{command}`")  # fmt: skip
    sys.stdout.write((out / "table3.md").read_text())


def _compare(args) -> None:
    import sys

    from ..experiments.compare import compare

    compare(
        args.data,
        args.out,
        minutes=args.minutes,
        seeds=args.seeds,
        size=args.size,
        device=args.device,
    )
    sys.stdout.write((args.out / "results.md").read_text())


def _demo(args) -> None:
    from ..experiments.demo import run_demo

    run_demo(
        args.data_dir,
        args.out,
        minutes=args.minutes,
        src=args.src,
        tgt=args.tgt,
        variant=args.variant,
        preset_name=args.preset,
        overrides=args.set,
        device=args.device,
    )
