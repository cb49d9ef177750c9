"""`transduce demo` (the whole pipeline on Multi30k) and `compare` (Transformer against RNN)."""

from __future__ import annotations

from pathlib import Path

from .common import env_path


def add_verbs(verbs) -> None:
    _add_demo(verbs)
    _add_compare(verbs)


def _add_demo(verbs) -> None:
    p = verbs.add_parser(
        "demo",
        help="prepare Multi30k en-de, train tiny, translate, score",
        description="The whole pipeline on Multi30k: prepare, train the tiny "
        "preset for --minutes, average, translate the 2016 test set, score it.",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=env_path("TRANSDUCE_DATA"),
        help="folder holding multi30k/ (default $TRANSDUCE_DATA; else download)",
    )
    p.add_argument("--out", type=Path, default=Path("demo"), help="where everything goes")
    p.add_argument("--minutes", type=float, default=10.0, help="training time")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--variant", default="tok", choices=["raw", "tok"])
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
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
        overrides=args.set,
        device=args.device,
    )
