"""`transduce score`, `parse` and `evaluate`: a trained model's log-probabilities and parses, and
the task's scores."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ..config import TOKENIZERS
from .common import (
    add_model_and_search_arguments,
    add_models_argument,
    check_writable,
    input_lines,
    write_output,
)


def add_verbs(verbs) -> None:
    _add_score(verbs)
    _add_parse(verbs)
    _add_evaluate(verbs)


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

    check_writable(args.output)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    pair = read_parallel(args.src, args.tgt)  # checks UTF-8 and equal line counts
    scores = translator.score(pair.src, pair.tgt)
    numbers = [s.per_token if args.per_token else s.log_prob for s in scores]
    write_output(args.output, "".join(f"{n:.4f}\n" for n in numbers))
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
    add_model_and_search_arguments(p)
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

    check_writable(args.output)
    translator = Translator.load(args.model, args.checkpoint, args.device)
    if translator.task.metric != "f1":
        models = ", ".join(str(path) for path in args.model)
        raise ValueError(f"{models} was not trained to parse; use `transduce translate`")
    given = {"beam_size": args.beam, "alpha": args.alpha, "batch_size": args.batch_size}
    decode = replace(translator.decode, **{k: v for k, v in given.items() if v is not None})
    if args.constrained:
        decode = replace(decode, constrained=True)
    results = translator.translate(input_lines(args.input), decode)
    write_output(args.output, "".join(hyps[0][0] + "\n" for hyps in results))
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
        "--tokenize",
        choices=[t for t in TOKENIZERS if t != "none"],
        help="translation, raw text: sacreBLEU's tokenizer (default 13a; zh for Chinese, char "
        "for Japanese and Thai, as `prepare` chooses by --tgt)",
    )
    p.add_argument(
        "--terms",
        type=Path,
        help="translation: also the share of these terms the output holds as whole words, one "
        "line a line of --hyp, phrases separated by tabs (as `translate --terms`)",
    )
    p.add_argument(
        "--gold-tags",
        action="store_true",
        help="parse: score with the gold POS tags (automatic when every output tag is XX)",
    )
    p.set_defaults(run=_evaluate)


def _evaluate(args) -> None:
    for flag, given in (("--terms", args.terms), ("--tokenize", args.tokenize)):
        if given is not None and (args.task != "translation" or args.alignments):
            raise ValueError(f"{flag} is for translations' BLEU: leave it out with --task parse "
                             "and --alignments")  # fmt: skip
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
        if args.tokenize is not None:
            if args.lowercase_tokenized:
                raise ValueError("--tokenize is for raw text: leave out --lowercase-tokenized")
            config = replace(config, tokenize=args.tokenize)
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
    if args.terms is not None:
        scores.append(_term_use(args, pair.src))
    for score in scores:
        sys.stdout.write(f"{score}\n")


def _term_use(args, hypotheses: list[str]):
    from ..data.corpus import read_lines
    from ..tasks.metrics import term_use

    lines = [line.removesuffix("\r").split("\t") for line in read_lines(args.terms)]
    if len(lines) != len(hypotheses):
        raise ValueError(f"--terms {args.terms} has {len(lines)} lines, --hyp {args.hyp} "
                         f"{len(hypotheses)}: one a line ('' for none)")  # fmt: skip
    tokenized = args.lowercase_tokenized  # the text's own tokens, spaced in every script
    return term_use(hypotheses, lines, lowercase=tokenized, tokenized=tokenized)
