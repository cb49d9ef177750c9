"""`transduce translate` and `evaluate`: a trained model on text, and the task's scores."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from .common import add_models_argument


def add_verbs(verbs) -> None:
    _add_translate(verbs)
    _add_score(verbs)
    _add_parse(verbs)
    _add_evaluate(verbs)


def _add_translate(verbs) -> None:
    p = verbs.add_parser(
        "translate",
        help="translate text with a trained model",
        description="Beam search (s6.1) over raw text, one sentence a line; "
        "stdin to stdout unless --input/--output are given.",
    )
    _add_model_and_search_arguments(p)
    p.add_argument("--n-best", type=int, help="print the n best as 'line ||| text ||| score'")
    p.add_argument("--max-len-b", type=int, help="output length <= input + this")
    p.add_argument(
        "--prefix",
        type=Path,
        help="a file of output starts, one a line of the input ('' for none): each output "
        "begins with its line's, the model's best completion of it (interactive translation)",
    )
    p.add_argument(
        "--int8",
        action="store_true",
        help="CPU only: the large products in int8 through oneDNN (1.2x faster at batch 64 "
        "on a 2-core Xeon, BLEU within 0.3)",
    )
    _add_sampling_arguments(p)
    p.add_argument(
        "--channel",
        type=Path,
        help="a model of the reverse direction: the beam's candidates re-ranked by score + "
        "weight * log P(source | candidate) (noisy channel, Yee et al. 2019)",
    )
    p.add_argument(
        "--channel-weight",
        type=float,
        help="the weight of --channel's log-probability (default 0.1, chosen on Multi30k's dev "
        "set: choose yours with benchmarks/noisy_channel.py)",
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


def _add_sampling_arguments(p) -> None:
    group = p.add_argument_group(
        "sampling",
        "draw each token from the model's distribution instead of searching for the likeliest "
        "output: back-translation's synthetic sources (Edunov et al. 2018); --n-best N draws N",
    )
    group.add_argument("--sampling", action="store_true", help="sample instead of beam search")
    group.add_argument("--top-k", type=int, default=0, help="among the k likeliest tokens only")
    group.add_argument(
        "--top-p", type=float, default=1.0, help="among the likeliest tokens of mass p (nucleus)"
    )
    group.add_argument("--temperature", type=float, default=1.0, help="<1 sharper, >1 flatter")
    group.add_argument("--seed", type=int, default=0, help="the same seed draws the same samples")


def _sampling(args):
    """The `Sampling` the flags ask for, or None; a sampling flag without --sampling is refused
    (it would silently do nothing)."""
    from ..decoding.sampling import Sampling

    given = {"top_k": args.top_k, "top_p": args.top_p, "temperature": args.temperature,
             "seed": args.seed}  # fmt: skip
    if not args.sampling:
        changed = [f"--{name.replace('_', '-')}" for name, value in given.items()
                   if value != getattr(Sampling, name)]  # fmt: skip
        if changed:
            raise ValueError(f"{', '.join(changed)}: for sampling, which is off: add --sampling")
        return None
    if args.beam is not None:
        raise ValueError("--beam is for beam search; with --sampling, --n-best N draws N samples")
    return Sampling(samples=args.n_best or 1, **given)


def _check_channel(args, sampling) -> None:
    if args.channel is None:
        if args.channel_weight is not None:
            raise ValueError("--channel-weight weighs --channel's model: add --channel")
        return
    if sampling or args.alignments or args.alignments_out:
        raise ValueError("--channel re-ranks the beam's candidates: leave out --sampling and "
                         "--alignments")  # fmt: skip


def _add_model_and_search_arguments(p) -> None:
    """The model, the input and output, and the search settings (unset: the run's own)."""
    add_models_argument(p)
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="a checkpoint file of the one --model (default: average.pt, else the newest)",
    )
    p.add_argument("--beam", type=int, help="beam size; 1 is greedy search (default: the run's)")
    p.add_argument("--alpha", type=float, help="length penalty (default: the run's)")
    p.add_argument("--batch-size", type=int, help="sentences per batch")
    p.add_argument("--input", type=Path, help="default: standard input")
    p.add_argument("--output", type=Path, help="default: standard output")
    p.add_argument("--device")


def _translate(args) -> None:
    from ..decoding.translate import Translator

    _check_writable(args.output, args.alignments_out)
    sampling = _sampling(args)  # flags that contradict each other, before the model loads
    _check_channel(args, sampling)
    # A bad model fails here, before any input is read.
    translator = Translator.load(args.model, args.checkpoint, args.device, int8=args.int8)
    reverse = Translator.load(args.channel, device=args.device) if args.channel else None
    lines = _input_lines(args.input)
    prefixes = _prefixes(args.prefix, len(lines))
    given = {
        "beam_size": args.beam,
        "alpha": args.alpha,
        "n_best": None if sampling else args.n_best,  # samples are counted by `sampling`
        "max_len_b": args.max_len_b,
        "batch_size": args.batch_size,
    }
    decode = replace(translator.decode, **{k: v for k, v in given.items() if v is not None})
    if args.alignments or args.alignments_out:
        if sampling:
            raise ValueError("--alignments come with beam search's best; leave out --sampling")
        _write_output(args.output, _aligned(translator, lines, decode, args, prefixes))
        return
    if reverse:
        from ..decoding.channel import DEFAULT_WEIGHT, channel_rerank

        weight = DEFAULT_WEIGHT if args.channel_weight is None else args.channel_weight
        ranked = channel_rerank(translator, reverse, lines, weight, decode, prefixes)
        results = [hyps[: decode.n_best] for hyps in ranked]
    else:
        results = translator.translate(lines, decode, sampling, prefixes)
    if (args.n_best or 1) == 1:
        text = "".join(hyps[0][0] + "\n" for hyps in results)
    else:
        text = "".join(
            f"{i} ||| {t} ||| {s:.4f}\n" for i, hyps in enumerate(results) for t, s in hyps
        )
    _write_output(args.output, text)


def _check_writable(*paths: Path | None) -> None:
    """Output paths checked before the model decodes a whole file for nothing."""
    for path in paths:
        if path is None:
            continue
        if path.is_dir():
            raise ValueError(f"{path} is a folder; name the file to write")
        if not path.parent.is_dir():
            raise ValueError(f"{path}: its folder {path.parent} does not exist")


def _input_lines(path: Path | None) -> list[str]:
    from ..data.corpus import decode_lines, read_lines

    return read_lines(path) if path else decode_lines(sys.stdin.buffer.read(), "<stdin>")


def _prefixes(path: Path | None, lines: int) -> list[str] | None:
    """--prefix's lines, one for each input line."""
    if path is None:
        return None
    from ..data.corpus import read_lines

    prefixes = read_lines(path)
    if len(prefixes) != lines:
        raise ValueError(f"--prefix {path} has {len(prefixes)} lines, the input {lines}: give "
                         "one a line ('' for none)")  # fmt: skip
    return prefixes


def _write_output(path: Path | None, text: str) -> None:
    if path:
        path.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _aligned(translator, lines: list[str], decode, args, prefixes) -> str:
    """Translations with their links; with --alignments-out the links go there instead."""
    from ..viz.alignment import pharaoh, translate_with_alignments

    if decode.n_best != 1:
        raise ValueError("--alignments gives the best translation only; leave out --n-best")
    results = translate_with_alignments(translator, lines, args.alignment_layer, decode, prefixes)
    if args.alignments_out:
        links = "".join(pharaoh(pairs) + "\n" for _, pairs in results)
        args.alignments_out.write_text(links, encoding="utf-8")
        return "".join(text + "\n" for text, _ in results)
    return "".join(f"{text} ||| {pharaoh(pairs)}\n" for text, pairs in results)


def _add_score(verbs) -> None:
    p = verbs.add_parser(
        "score",
        help="the model's log-probability of given translations (forced decoding)",
        description="log P(target | source) of each line pair under the model (or the ensemble), "
        "natural log, the target's EOS included: the number beam search ranks by, for targets "
        "you give (to rerank n-best lists, filter a corpus, compare models by perplexity). One "
        "number a line; the corpus perplexity on standard error.",
    )
    add_models_argument(p)
    p.add_argument("--checkpoint", type=Path, help="a checkpoint file of the one --model")
    p.add_argument("--src", type=Path, required=True, help="the sources, one a line")
    p.add_argument(
        "--tgt",
        type=Path,
        required=True,
        help="their targets, line for line: translations, or bracketed trees for a parser",
    )
    p.add_argument(
        "--per-token",
        action="store_true",
        help="the mean log-probability per target subword (EOS included), not the sum",
    )
    p.add_argument("--output", type=Path, help="default: standard output")
    p.add_argument("--device")
    p.set_defaults(run=_score)


def _score(args) -> None:
    import logging

    from ..data.corpus import read_parallel
    from ..decoding.forced import corpus_perplexity
    from ..decoding.translate import Translator

    _check_writable(args.output)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    pair = read_parallel(args.src, args.tgt)  # checks UTF-8 and equal line counts
    scores = translator.score(pair.src, pair.tgt)
    numbers = [s.per_token if args.per_token else s.log_prob for s in scores]
    _write_output(args.output, "".join(f"{n:.4f}\n" for n in numbers))
    log = logging.getLogger("transduce")
    subwords = sum(s.tokens for s in scores)
    log.info(
        "%d pairs, %d target subwords with EOS: perplexity %.3f",
        len(scores), subwords, corpus_perplexity(scores),
    )  # fmt: skip
    unknown = [line for line, s in enumerate(scores, start=1) if s.unknown]
    if unknown:
        log.warning(
            "%d targets hold characters the vocabulary lacks, scored as <unk> (a token the "
            "model never writes), first on line %d",
            len(unknown), unknown[0],
        )  # fmt: skip


def _add_parse(verbs) -> None:
    p = verbs.add_parser(
        "parse",
        help="parse tokenised sentences into bracketed trees",
        description="Constituency parsing (s6.3) with a model trained on `prepare ptb` data: "
        "one tokenised sentence a line in, one bracketed tree a line out. Beam 21, length "
        "penalty 0.3, at most input + 300 tokens unless told otherwise.",
    )
    _add_model_and_search_arguments(p)
    p.add_argument(
        "--constrained",
        action="store_true",
        help="search only trees over exactly the input's words (one XX per word, brackets "
        "balanced and matched); default: the paper's search, malformed outputs repaired",
    )
    p.set_defaults(run=_parse)


def _parse(args) -> None:
    import logging

    from ..decoding.translate import Translator

    _check_writable(args.output)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    if translator.task.metric != "f1":
        models = ", ".join(str(path) for path in args.model)
        raise ValueError(f"{models} was not trained to parse; use `transduce translate`")
    given = {"beam_size": args.beam, "alpha": args.alpha, "batch_size": args.batch_size}
    decode = replace(translator.decode, **{k: v for k, v in given.items() if v is not None})
    if args.constrained:
        decode = replace(decode, constrained=True)
    results = translator.translate(_input_lines(args.input), decode)
    _write_output(args.output, "".join(hyps[0][0] + "\n" for hyps in results))
    logging.getLogger("transduce").info(
        "%d of %d outputs were repaired into trees", translator.task.repaired, len(results)
    )


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
    p.add_argument(
        "--task",
        default="translation",
        choices=["translation", "parse"],
        help="translation: BLEU and chrF; parse: EVALB (COLLINS.prm) on one tree a line",
    )
    p.add_argument(
        "--lowercase-tokenized",
        action="store_true",
        help="translation: lowercased BLEU on whitespace tokens, as published Multi30k results",
    )
    p.add_argument(
        "--gold-tags",
        action="store_true",
        help="parse: score with the gold POS tags (automatic when every output tag is XX)",
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
    if args.task == "translation":
        config = scoring(args.lowercase_tokenized)
    else:
        from ..tasks.parsing import carries_placeholders

        gold_tags = args.gold_tags or carries_placeholders(pair.src)
        config = TaskConfig(name=args.task, tags=not gold_tags)
    task = get_task(config)
    try:
        scores = task.report(pair.src, pair.tgt)
    except ValueError as error:  # an unreadable tree, named "test tree N" or "gold tree N"
        raise ValueError(
            f"{error} (test trees: --hyp {args.hyp}, gold: --ref {args.ref})"
        ) from error
    for score in scores:
        sys.stdout.write(f"{score}\n")
