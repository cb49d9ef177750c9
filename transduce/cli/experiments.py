"""`transduce demo`: the whole pipeline on Multi30k in one command."""

from __future__ import annotations

from pathlib import Path

from .common import env_path


def add_verbs(verbs) -> None:
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
