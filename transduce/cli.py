"""The `transduce` command: each verb turns its arguments into a Config or paths, then makes one
library call."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

from . import __version__

logger = logging.getLogger("transduce")

WIDE_SCRIPTS = {"ja", "zh", "ko"}  # sentencepiece's advice: character coverage 0.9995


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
    )
    from .checkpoint import CheckpointError
    from .config import ConfigError
    from .corpus import DataError
    from .export import ExportError
    from .runlog import RunFolderError
    from .train import TrainingError

    try:
        args.run(args)
    except (
        ConfigError,
        DataError,
        TrainingError,
        RunFolderError,
        CheckpointError,
        ExportError,
        FileNotFoundError,
        ValueError,
    ) as error:
        sys.exit(f"transduce {args.verb}: error: {error}")
    except KeyboardInterrupt:
        sys.exit(f"transduce {args.verb}: interrupted")
    except BrokenPipeError:  # e.g. `transduce evaluate ... | head -1`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transduce",
        description="The Transformer of 'Attention Is All You Need': prepare, train, translate.",
    )
    parser.add_argument("--version", action="version", version=f"transduce {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for add in (
        _add_export,
        _add_prepare,
        _add_train,
        _add_translate,
        _add_evaluate,
        _add_average,
        _add_params,
        _add_demo,
    ):
        add(verbs)
    return parser


# --- prepare ---------------------------------------------------------------------------------


def _add_prepare(verbs) -> None:
    p = verbs.add_parser(
        "prepare",
        help="read or download a corpus, train the BPE, encode it",
        description="Prepare a parallel corpus: read it from --data-dir or "
        "download it, check it, train a joint BPE, encode and store every split.",
    )
    p.add_argument("corpus", choices=["multi30k", "small_parallel_enja", "files"])
    p.add_argument("--src", required=True, help="source language, e.g. en")
    p.add_argument("--tgt", required=True, help="target language, e.g. de")
    p.add_argument(
        "--variant",
        default="raw",
        choices=["raw", "tok"],
        help="multi30k: raw cased text, or the lowercased Moses-tokenized files",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=_env_path("TRANSDUCE_DATA"),
        help="folder holding multi30k/ etc. (default $TRANSDUCE_DATA; else download)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder for the prepared data")
    p.add_argument("--vocab-size", type=int, default=10000, help="joint BPE size (paper: 37000)")
    p.add_argument(
        "--max-len",
        type=int,
        default=250,
        help="drop training pairs with a side longer than this many subwords",
    )
    p.add_argument(
        "--max-len-ratio",
        type=float,
        default=9.0,
        help="drop training pairs whose length ratio exceeds this",
    )
    p.add_argument(
        "--character-coverage",
        type=float,
        default=None,
        help="sentencepiece character coverage (default 1.0; 0.9995 for ja/zh/ko)",
    )
    for name in ("train", "dev", "test"):
        p.add_argument(f"--{name}-src", type=Path, help=f"with `files`: the {name} source file")
        p.add_argument(f"--{name}-tgt", type=Path, help=f"with `files`: the {name} target file")
    p.add_argument("--force", action="store_true", help="redo even if --out is up to date")
    p.set_defaults(run=_prepare)


def _prepare(args) -> None:
    from .corpus import LengthFilter, corpus_files
    from .dataset import prepare

    if args.corpus == "files":
        splits = _user_files(args)
    else:
        splits = corpus_files(
            args.corpus, args.src, args.tgt, variant=args.variant, data_dir=args.data_dir
        )
    coverage = args.character_coverage
    if coverage is None:
        coverage = 0.9995 if {args.src, args.tgt} & WIDE_SCRIPTS else 1.0
    data = prepare(
        splits,
        args.out,
        vocab_size=args.vocab_size,
        length_filter=LengthFilter(max_len=args.max_len, max_len_ratio=args.max_len_ratio),
        description={
            "corpus": args.corpus,
            "variant": args.variant,
            "src": args.src,
            "tgt": args.tgt,
        },
        character_coverage=coverage,
        force=args.force,
    )
    logger.info(
        "prepared %s: splits %s, vocabulary %d, training pairs %s",
        args.out,
        ", ".join(data.splits),
        data.vocab.size,
        data.meta["filter_report"],
    )


def _user_files(args) -> dict[str, tuple[Path, Path]]:
    splits = {}
    for name in ("train", "dev", "test"):
        src, tgt = getattr(args, f"{name}_src"), getattr(args, f"{name}_tgt")
        if (src is None) != (tgt is None):
            raise ValueError(f"give both --{name}-src and --{name}-tgt, or neither")
        if src is not None:
            splits[name] = (src, tgt)
    if "train" not in splits or "dev" not in splits:
        raise ValueError("`files` needs --train-src/--train-tgt and --dev-src/--dev-tgt")
    return splits


# --- train -----------------------------------------------------------------------------------


def _add_train(verbs) -> None:
    p = verbs.add_parser(
        "train",
        help="train a model on prepared data",
        description="Train a Transformer (s5). Settings come from --preset, "
        "then --config FILE.yaml, then --set key=value, then the flags.",
    )
    p.add_argument("--data", type=Path, required=True, help="a folder made by `prepare`")
    p.add_argument(
        "--preset",
        default="base",
        help="base, big, tiny, small, or a Table 3 row such as B1 (default base)",
    )
    p.add_argument("--config", type=Path, help="YAML of overrides: {train: {max_steps: 2000}}")
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="overrides such as train.warmup_steps=2000 model.pre_norm=true",
    )
    p.add_argument("--out", type=Path, required=True, help="the run folder")
    p.add_argument("--max-steps", type=int, help="= train.max_steps")
    p.add_argument("--max-minutes", type=float, help="= train.max_minutes")
    p.add_argument("--seed", type=int, help="= train.seed")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its newest good checkpoint",
    )
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: a GPU if there is one)")
    p.set_defaults(run=_train)


def _train(args) -> None:
    from .train import train

    path = train(_config_from(args), args.data, args.out, resume=args.resume, device=args.device)
    logger.info("done: %s", path)


def _config_from(args):
    from .config import load_overrides, override, parse_assignments, preset

    config = preset(args.preset)
    if args.config:
        config = override(config, load_overrides(args.config))
    config = override(config, parse_assignments(args.set))
    flags = {
        "train.max_steps": args.max_steps,
        "train.max_minutes": args.max_minutes,
        "train.seed": args.seed,
    }
    return override(config, {k: v for k, v in flags.items() if v is not None})


# --- translate, evaluate, average --------------------------------------------------------------


def _add_translate(verbs) -> None:
    p = verbs.add_parser(
        "translate",
        help="translate text with a trained run",
        description="Beam search (s6.1) over raw text, one sentence a line; "
        "stdin to stdout unless --input/--output are given.",
    )
    p.add_argument("--model", type=Path, required=True, help="the run folder")
    p.add_argument(
        "--checkpoint", type=Path, help="a checkpoint file (default: average.pt, else the newest)"
    )
    # Unset flags keep the run's own decode settings (the paper's: beam 4, alpha 0.6, +50).
    p.add_argument("--beam", type=int, help="beam size; 1 is greedy search")
    p.add_argument("--alpha", type=float, help="length penalty")
    p.add_argument("--n-best", type=int, help="print the n best as 'line ||| text ||| score'")
    p.add_argument("--max-len-b", type=int, help="output length <= input + this")
    p.add_argument("--batch-size", type=int, help="sentences per batch")
    p.add_argument("--input", type=Path)
    p.add_argument("--output", type=Path)
    p.add_argument("--device")
    p.add_argument(
        "--int8",
        action="store_true",
        help="CPU only: int8 linear layers (about 1.27x faster, BLEU within 0.3)",
    )
    p.set_defaults(run=_translate)


def _translate(args) -> None:
    from .corpus import decode_lines, read_lines
    from .translate import Translator

    # A bad model fails here, before any input is read.
    translator = Translator.load(args.model, args.checkpoint, args.device, int8=args.int8)
    lines = (
        read_lines(args.input) if args.input else decode_lines(sys.stdin.buffer.read(), "<stdin>")
    )
    given = {
        "beam_size": args.beam,
        "alpha": args.alpha,
        "n_best": args.n_best,
        "max_len_b": args.max_len_b,
        "batch_size": args.batch_size,
    }
    decode = replace(translator.decode, **{k: v for k, v in given.items() if v is not None})
    results = translator.translate(lines, decode)
    if decode.n_best == 1:
        text = "".join(hyps[0][0] + "\n" for hyps in results)
    else:
        text = "".join(
            f"{i} ||| {t} ||| {s:.4f}\n" for i, hyps in enumerate(results) for t, s in hyps
        )
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _add_evaluate(verbs) -> None:
    p = verbs.add_parser("evaluate", help="score translations: BLEU with signature, chrF")
    p.add_argument("--hyp", type=Path, required=True)
    p.add_argument("--ref", type=Path, required=True)
    p.add_argument(
        "--lowercase-tokenized",
        action="store_true",
        help="lowercased BLEU on whitespace tokens, as published Multi30k results",
    )
    p.set_defaults(run=_evaluate)


def _evaluate(args) -> None:
    from .corpus import read_parallel
    from .metrics import bleu, chrf

    pair = read_parallel(args.hyp, args.ref)  # checks UTF-8 and equal line counts
    sys.stdout.write(f"{bleu(pair.src, pair.tgt, args.lowercase_tokenized)}\n")
    sys.stdout.write(f"{chrf(pair.src, pair.tgt)}\n")


def _add_average(verbs) -> None:
    p = verbs.add_parser("average", help="average the last K checkpoints of a run")
    p.add_argument("--model", type=Path, required=True, help="the run folder")
    p.add_argument("--last", type=int, default=5, help="how many (the paper: 5 base, 20 big)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(run=_average)


def _average(args) -> None:
    from .checkpoint import CheckpointStore, average, save

    paths = CheckpointStore(args.model, keep_last=max(args.last, 1)).last_paths(args.last)
    if not paths:
        raise FileNotFoundError(f"{args.model}: no checkpoints to average")
    save(average(paths), args.out)
    logger.info("averaged %s into %s", ", ".join(p.name for p in paths), args.out)


def _add_export(verbs) -> None:
    p = verbs.add_parser(
        "export",
        help="write the model for Hugging Face or CTranslate2",
        description="Export a run as a Hugging Face folder (MarianMTModel if post-norm, "
        "PegasusForConditionalGeneration if pre-norm), or through it as a CTranslate2 model.",
    )
    p.add_argument("--model", type=Path, required=True, help="the run folder")
    p.add_argument("--to", required=True, choices=["hf", "ctranslate2"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--checkpoint", type=Path, help="default: average.pt, else the newest")
    p.add_argument(
        "--quantize",
        choices=["int8", "int8_float32", "int16", "float16"],
        help="ctranslate2 only: weight quantization",
    )
    p.set_defaults(run=_export)


def _export(args) -> None:
    from .export import export_ctranslate2, export_hf

    if args.to == "hf":
        if args.quantize:
            raise ValueError("--quantize applies to --to ctranslate2 only")
        export_hf(args.model, args.out, args.checkpoint)
    else:
        export_ctranslate2(args.model, args.out, args.checkpoint, args.quantize)


# --- params, demo ------------------------------------------------------------------------------


def _add_params(verbs) -> None:
    p = verbs.add_parser("params", help="print a preset's parameter count")
    p.add_argument("--preset", required=True)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.set_defaults(run=_params)


def _params(args) -> None:
    import torch

    from .config import override, parse_assignments, preset
    from .transformer import Transformer, count_parameters

    config = override(preset(args.preset), parse_assignments(args.set))
    config = override(config, {"model.vocab_size": args.vocab_size})
    with torch.device("meta"):  # shapes only: even `big` costs no memory
        model = Transformer(config.model)
    sys.stdout.write(f"{args.preset}: {config.model}\n{count_parameters(model)}\n")


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
        default=_env_path("TRANSDUCE_DATA"),
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
    from .demo import run_demo

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


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


__all__ = ["main"]
