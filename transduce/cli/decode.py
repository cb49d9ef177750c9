"""`transduce translate` and `evaluate`: a trained model on text, and the task's scores."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path


def add_verbs(verbs) -> None:
    _add_translate(verbs)
    _add_evaluate(verbs)


def _add_translate(verbs) -> None:
    p = verbs.add_parser(
        "translate",
        help="translate text with a trained model",
        description="Beam search (s6.1) over raw text, one sentence a line; "
        "stdin to stdout unless --input/--output are given.",
    )
    p.add_argument("--model", type=Path, required=True, help="a run folder, or one checkpoint file")
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
    p.add_argument(
        "--alignments",
        action="store_true",
        help="word alignments from cross attention: 'translation ||| 0-0 1-2 ...' per line "
        "(source-target, 0-based), or only the links into --alignments-out",
    )
    p.add_argument(
        "--alignment-layer", type=int, help="decoder layer to align with (default: penultimate)"
    )
    p.add_argument(
        "--alignments-out", type=Path, help="write the Pharaoh links here, one line per input line"
    )
    p.set_defaults(run=_translate)


def _translate(args) -> None:
    from ..data.corpus import decode_lines, read_lines
    from ..decoding.translate import Translator

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
    if args.alignments or args.alignments_out:
        _write(args.output, _aligned(translator, lines, decode, args))
        return
    results = translator.translate(lines, decode)
    if decode.n_best == 1:
        text = "".join(hyps[0][0] + "\n" for hyps in results)
    else:
        text = "".join(
            f"{i} ||| {t} ||| {s:.4f}\n" for i, hyps in enumerate(results) for t, s in hyps
        )
    _write(args.output, text)


def _write(path: Path | None, text: str) -> None:
    if path:
        path.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _aligned(translator, lines: list[str], decode, args) -> str:
    """Translations with their links; with --alignments-out the links go there instead."""
    from ..viz.alignment import pharaoh, translate_with_alignments

    if decode.n_best != 1:
        raise ValueError("--alignments gives the best translation only; leave out --n-best")
    results = translate_with_alignments(translator, lines, args.alignment_layer, decode)
    if args.alignments_out:
        links = "".join(pharaoh(pairs) + "\n" for _, pairs in results)
        args.alignments_out.write_text(links, encoding="utf-8")
        return "".join(text + "\n" for text, _ in results)
    return "".join(f"{text} ||| {pharaoh(pairs)}\n" for text, pairs in results)


def _add_evaluate(verbs) -> None:
    p = verbs.add_parser("evaluate", help="score output against references with the task's metrics")
    p.add_argument("--hyp", type=Path, required=True)
    p.add_argument("--ref", type=Path, required=True)
    p.add_argument(
        "--alignments",
        action="store_true",
        help="score word alignments: AER (Och & Ney 2003) of Pharaoh links against a gold file "
        "with sure i-j and possible i?j links",
    )
    p.add_argument("--task", default="translation", choices=["translation"])
    p.add_argument(
        "--lowercase-tokenized",
        action="store_true",
        help="translation: lowercased BLEU on whitespace tokens, as published Multi30k results",
    )
    p.set_defaults(run=_evaluate)


def _evaluate(args) -> None:
    if args.alignments:
        from ..viz.alignment import aer_of_files

        sys.stdout.write(f"AER = {100 * aer_of_files(args.hyp, args.ref):.2f}\n")
        return
    from ..config import TaskConfig
    from ..data.corpus import read_parallel
    from ..tasks import get_task
    from ..tasks.translation import scoring

    pair = read_parallel(args.hyp, args.ref)  # checks UTF-8 and equal line counts
    config = scoring(args.lowercase_tokenized) if args.task == "translation" else None
    task = get_task(config or TaskConfig(name=args.task))
    for score in task.report(pair.src, pair.tgt):
        sys.stdout.write(f"{score}\n")
