"""`transduce translate`: a trained model on text, a whole file at once (batched by length), or
group by group as the lines come (`--buffer-size`; line by line at a terminal), each group's
translations written as soon as they are done."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from ..config import PRECISIONS
from .common import add_model_and_search_arguments, check_writable, input_lines
from .guides import Guides, add_guide_arguments

logger = logging.getLogger("transduce")


def add_verbs(verbs) -> None:
    _add_translate(verbs)


def _add_translate(verbs) -> None:
    p = verbs.add_parser(
        "translate",
        help="translate text with a trained model",
        description="Beam search (s6.1) over raw text, one sentence a line; "
        "stdin to stdout unless --input/--output are given. Typed at a terminal, each line "
        "is translated as it is entered.",
    )
    add_model_and_search_arguments(p)
    p.add_argument("--n-best", type=int, help="print the n best as 'line ||| text ||| score'")
    p.add_argument("--max-len-b", type=int, help="output length <= input + this")
    _add_output_rules(p)
    add_guide_arguments(p)
    p.add_argument(
        "--buffer-size",
        type=int,
        help="translate this many lines at a time, each group written as soon as it is done "
        "(1: line by line, for a program that feeds a pipe and waits); default: the whole "
        "input at once, or line by line when typing at a terminal",
    )
    _add_cpu_arguments(p)
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


def _add_cpu_arguments(p) -> None:
    """How the search runs on a CPU: its products' number type and its processes."""
    p.add_argument(
        "--int8",
        action="store_true",
        help="CPU only: the large products in int8 through oneDNN (1.2x faster at batch 64 "
        "on a 2-core Xeon, BLEU within 0.3)",
    )
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="the search's large products on a CPU: bf16 (AVX-512 BF16 or AMX), fp32, or auto: "
        "bf16 where the CPU has AVX-512 BF16 and no AMX (batch 64 1.08-1.3x on a Zen 4 EPYC, "
        "BLEU within 0.1), else fp32 (default: the run's, auto)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="CPU only: processes of one thread each, taking the batches in turn (0: one per "
        "thread torch runs; 1: one process whose threads share each batch); default: the run's, 0",
    )


def _add_output_rules(p) -> None:
    """What no output may hold, for a model that writes it: loops, the unknown token."""
    p.add_argument(
        "--no-repeat-ngram",
        type=int,
        help="no output holds an n-gram of this many subwords twice: a weak model's loops cut "
        "(3 or 4 usual; 0: off; default: the run's, off)",
    )
    p.add_argument(
        "--no-unk",
        action="store_true",
        default=None,
        help="never write the unknown token (' ⁇ ', where the vocabulary lacks a character): "
        "the likeliest other instead (default: the run's, allowed)",
    )
    p.add_argument(
        "--allow-unk",
        dest="no_unk",
        action="store_false",
        help="the unknown token allowed, for a run that rules it out (decode.no_unk)",
    )


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


def _say_precision(decode, device) -> None:
    from ..models import bf16_decoding

    if bf16_decoding.chosen(decode.precision, device):
        logger.info("the search's large products in bfloat16 (decode.precision=%s; "
                    "--precision fp32 keeps float32)", decode.precision)  # fmt: skip


def _translate(args) -> None:
    from ..decoding.translate import Translator
    from ..models.matmul import cache_products_for_decoding

    cache_products_for_decoding()  # a process that decodes only
    check_writable(args.output, args.alignments_out)
    sampling = _sampling(args)  # flags that contradict each other, before the model loads
    _check_channel(args, sampling)
    aligned = bool(args.alignments or args.alignments_out)
    if aligned and sampling:
        raise ValueError("--alignments come with beam search's best; leave out --sampling")
    if aligned and (args.n_best or 1) != 1:
        raise ValueError("--alignments gives the best translation only; leave out --n-best")
    if (args.terms or args.glossary) and sampling:
        raise ValueError("--terms and --glossary need beam search: leave out --sampling")
    guides = Guides(args)  # its files read (and a glossary's mistakes found) now
    if args.buffer_size is not None and args.buffer_size < 1:
        raise ValueError(f"--buffer-size {args.buffer_size}: translate at least 1 line at a time")
    # A bad model fails here, before any input is read.
    translator = Translator.load(args.model, args.checkpoint, args.device, int8=args.int8)
    guides.check(translator)
    reverse = Translator.load(args.channel, device=args.device) if args.channel else None
    given = {
        "beam_size": args.beam,
        "terms_beam": args.beam,  # the beam asked for, terms or not; else the run's wider one
        "alpha": args.alpha,
        "n_best": None if sampling else args.n_best,  # samples are counted by `sampling`
        "max_len_b": args.max_len_b,
        "batch_size": args.batch_size,
        "no_repeat_ngram": args.no_repeat_ngram,
        "no_unk": args.no_unk,
        "precision": args.precision,
        "workers": args.workers,
    }
    decode = replace(translator.decode, **{k: v for k, v in given.items() if v is not None})
    _say_precision(decode, translator.device)  # and refuse one this CPU cannot run, before input
    groups = _groups(args, guides)
    output, links, done = _Sink(args.output), _Sink(args.alignments_out), 0
    try:
        for lines in groups:
            given = guides.of_group(lines, done)
            drawn = sampling and _group_sampling(sampling, done)
            if aligned:
                text, pairs = _aligned(translator, lines, decode, args, given)
                links.write(pairs)  # nothing without --alignments-out
            else:
                text = _translated(translator, reverse, lines, decode, drawn, given, args, done)
            output.write(text)
            done += len(lines)
        guides.check_counts(done)
        output.finish()
        links.finish()
    finally:
        output.close()
        links.close()


def _translated(translator, reverse, lines, decode, sampling, guides, args, first: int) -> str:
    """One group's translations as `translate` prints them; `first` numbers its lines;
    `guides`: its lines' prefixes and terms, those given."""
    if reverse:
        from ..decoding.channel import DEFAULT_WEIGHT, channel_rerank

        weight = DEFAULT_WEIGHT if args.channel_weight is None else args.channel_weight
        ranked = channel_rerank(translator, reverse, lines, weight, decode, **guides)
        results = [hyps[: decode.n_best] for hyps in ranked]
    else:
        results = translator.translate(lines, decode, sampling, **guides)
    if (args.n_best or 1) == 1:
        return "".join(hyps[0][0] + "\n" for hyps in results)
    return "".join(
        f"{first + i} ||| {t} ||| {s:.4f}\n" for i, hyps in enumerate(results) for t, s in hyps
    )


def _aligned(translator, lines: list[str], decode, args, guides) -> tuple[str, str]:
    """Translations with their links, or, with --alignments-out, the translations and the links
    apart."""
    from ..viz.alignment import pharaoh, translate_with_alignments

    results = translate_with_alignments(translator, lines, args.alignment_layer, decode, **guides)
    if args.alignments_out:
        links = "".join(pharaoh(pairs) + "\n" for _, pairs in results)
        return "".join(text + "\n" for text, _ in results), links
    return "".join(f"{text} ||| {pharaoh(pairs)}\n" for text, pairs in results), ""


def _buffer_size(args) -> int | None:
    """Lines a group: --buffer-size, else 1 for a person typing at a terminal, else all (None)."""
    if args.buffer_size is not None:
        return args.buffer_size
    if args.input is None and sys.stdin.isatty():
        logger.info("type a sentence and Enter for its translation; Ctrl-D ends")
        return 1
    return None


def _groups(args, guides: Guides) -> Iterator[list[str]]:
    """The input's lines, --buffer-size at a time (`_buffer_size`). A file, or standard input
    to be read whole, is read at once and the line counts of --prefix and --terms checked
    before anything is decoded; otherwise standard input is read as the lines come
    (`_stdin_groups`)."""
    size = _buffer_size(args)
    if args.input is None and size is not None:
        return _stdin_groups(size)
    lines = input_lines(args.input)
    guides.check_counts(len(lines))
    step = size or max(len(lines), 1)
    return iter([lines[start : start + step] for start in range(0, len(lines), step)])


def _stdin_groups(size: int) -> Iterator[list[str]]:
    """Standard input's lines `size` at a time, each group as soon as its last line has come, so
    that it is translated before the next is typed or sent."""
    group: list[str] = []
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        group.append(_decoded(raw, number))
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def _decoded(raw: bytes, number: int) -> str:
    from ..data.corpus import DataError

    try:
        return raw.removesuffix(b"\n").decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"<stdin> line {number}: invalid UTF-8") from error


def _group_sampling(sampling, first: int):
    """The sampling settings of the group whose first line is number `first` (from 0): its own
    random stream, derived from the seed and `first` (numpy's SeedSequence, so that neither
    other groups nor other seeds draw the same numbers, as seed + first would); the first group,
    and so a whole input, draws from the seed itself."""
    if first == 0:
        return sampling
    import numpy as np

    state = np.random.SeedSequence([sampling.seed, first]).generate_state(1, np.uint64)[0]
    return replace(sampling, seed=int(state >> 1))  # within torch's signed 64-bit seeds


class _Sink:
    """Standard output, or a file opened at its first write (input that fails before any group
    is translated leaves an existing file as it was); flushed after every write."""

    def __init__(self, path: Path | None):
        self.path, self.file = path, None

    def write(self, text: str) -> None:
        if not text:
            return
        if self.path is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        if self.file is None:
            self.file = self.path.open("w", encoding="utf-8")
        self.file.write(text)
        self.file.flush()

    def finish(self) -> None:
        """All is written: a file never written (an empty input) is made, empty."""
        if self.path is not None and self.file is None:
            self.path.write_text("", encoding="utf-8")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
