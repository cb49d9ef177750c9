"""Translating text with a trained model: encode, batch by length, beam search, decode (s6.1)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch

from ..config import DecodeConfig, TaskConfig
from ..data.batching import collate
from ..data.bpe import Vocab
from ..lines import sentence_list
from ..models import Seq2Seq, bf16_decoding
from ..models.bf16_decoding import Bf16Weights, bf16_products
from ..models.ensemble import load_ensemble
from ..models.int8 import Int8Weights, int8_products
from ..models.int8 import available as int8_available
from ..models.matmul import PackedWeights, packed_for_inference
from ..models.saved import load_model, model_paths
from ..runtime import pick_device
from ..tasks import get_task
from ..tasks.translation import is_tokenized
from .avoid import check_terms, parse_avoided, with_unknown_avoided
from .constraints import TreeConstraint
from .forced import TargetScore, score_ids
from .glossary import Glossary
from .prefix import Prefix, parse_prefixes
from .repeats import NO_REPEATS_IN_TREES
from .sampling import Sampling, sample
from .search import Hypothesis, beam_search
from .terms import Terms, parse_terms
from .workers import in_workers, worker_count

logger = logging.getLogger(__name__)


@torch.no_grad()
def decode_ids(
    model: Seq2Seq,
    vocab: Vocab,
    sources: list[list[int]],
    decode: DecodeConfig,
    device: torch.device,
    packed_weights: PackedWeights | None = None,
    int8_weights: Int8Weights | None = None,
    sampling: Sampling | None = None,
    prefixes: list[Prefix] | None = None,
    terms: list[Terms] | None = None,
    avoid: Terms | None = None,
    bf16_weights: Bf16Weights | None = None,
) -> list[list[Hypothesis]]:
    """Beam search over id sequences (without EOS), batched by length; results in input order.
    `packed_weights`: a store that keeps the weights packed for oneDNN between calls.
    `int8_weights`: given, the large products run in int8 (`models/int8.py`), their weights
    quantized into this store. `sampling`: given, samples instead of the beam's n best
    (`decoding/sampling.py`), drawn from one random stream over all the batches. `prefixes`:
    each source's start of the output (possibly none), forced (`decoding/prefix.py`). `terms`:
    each source's phrases (possibly none) its outputs must hold (`decoding/terms.py`); `avoid`:
    phrases no output may hold (`decoding/avoid.py`). `bf16_weights`: a store that keeps the
    weights' bfloat16 copies between calls, where `decode.precision` takes that route
    (`models/bf16_decoding.py`)."""
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    jobs = [
        (indices[start : start + settings.batch_size], settings)
        for indices, settings in _beams(order, decode, terms if sampling is None else None)
        for start in range(0, len(indices), settings.batch_size)
    ]
    # Samples are drawn from one random stream over all the batches, in order: in-process.
    workers = 1 if sampling else worker_count(decode.workers, device, len(jobs))
    int8 = nullcontext() if int8_weights is None else int8_products(int8_weights)
    low = bf16_decoding.chosen(decode.precision, device)
    bf16 = bf16_products(bf16_weights) if low else nullcontext()
    generator = sampling.generator(device) if sampling else None

    def decode_job(job: tuple[list[int], DecodeConfig]) -> list[list[Hypothesis]]:
        chunk, settings = job
        forced = None if prefixes is None else [prefixes[i] for i in chunk]
        held = None if terms is None else [terms[i] for i in chunk]
        return _decode_batch(
            model, vocab, [sources[i] for i in chunk], settings, device, sampling, generator,
            forced if forced and any(forced) else None, held if held and any(held) else None,
            avoid or None,
        )  # fmt: skip

    results: list[list[Hypothesis]] = [[] for _ in sources]
    with packed_for_inference(packed_weights), int8, bf16:
        for (chunk, _), found in zip(jobs, in_workers(jobs, decode_job, workers), strict=True):
            for i, hyps in zip(chunk, found, strict=True):
                results[i] = hyps
    return results


def _beams(order: list[int], decode: DecodeConfig, terms: list[Terms] | None):
    """The sentences (in `order`) to search with each beam: those with terms with at least
    `decode.terms_beam`, the others with `decode.beam_size`."""
    if terms is None or decode.terms_beam <= decode.beam_size or not any(terms):
        return [(order, decode)]
    wide = replace(decode, beam_size=decode.terms_beam)
    return [([i for i in order if terms[i]], wide), ([i for i in order if not terms[i]], decode)]


def _decode_batch(
    model: Seq2Seq,
    vocab: Vocab,
    sources: list[list[int]],
    decode: DecodeConfig,
    device: torch.device,
    sampling: Sampling | None,
    generator: torch.Generator | None,
    prefixes: list[Prefix] | None,
    terms: list[Terms] | None = None,
    avoid: Terms | None = None,
) -> list[list[Hypothesis]]:
    """One batch of sentences: the beam's n best of each, or its samples."""
    src = collate([(ids, []) for ids in sources], vocab.pad, vocab.bos, vocab.eos).src.to(device)
    specials = {"bos": vocab.bos, "eos": vocab.eos, "pad": vocab.pad}
    limits = {
        "alpha": decode.alpha,
        "max_len_a": decode.max_len_a,
        "max_len_b": decode.max_len_b,
        "max_len": model.max_positions,  # e.g. learned positions: none may outgrow the table
        "prefixes": prefixes,
        "avoid": with_unknown_avoided(avoid, vocab.unk) if decode.no_unk else avoid,
        "no_repeat_ngram": decode.no_repeat_ngram,
    }
    if sampling is not None:
        if terms is not None:
            raise ValueError("sampling draws from the model alone: terms need beam search")
        return sample(model, src, sampling, generator=generator, **specials, **limits)
    constraint = TreeConstraint(vocab, sources, device) if decode.constrained else None
    return beam_search(
        model,
        src,
        beam_size=decode.beam_size,
        n_best=decode.n_best,
        constraint=constraint,
        terms=terms,
        **specials,
        **limits,
    )


class Translator:
    """A trained model with its vocabulary: raw text in, the task's output out."""

    def __init__(
        self,
        model: Seq2Seq,
        vocab: Vocab,
        decode: DecodeConfig,
        device: torch.device,
        task: TaskConfig | None = None,
        int8: bool = False,
    ):
        """`int8`: the large products in int8 (CPU only; `models/int8.py`). An option, not the
        default: float32 (or bfloat16's products where `decode.precision` takes them, as
        training's on such a CPU) keeps the model's outputs."""
        if int8 and device.type != "cpu":
            raise ValueError("int8 decoding is for the CPU; on a GPU, leave it out")
        if int8 and not int8_available:
            raise ValueError("int8 decoding needs a PyTorch built with oneDNN (mkldnn)")
        self.model, self.vocab, self.decode, self.device = model.eval(), vocab, decode, device
        self.task = get_task(task or TaskConfig())
        self.packed_weights: PackedWeights | None = None  # see keep_packed_weights
        # Quantized on first use and kept: a translator decodes call after call with them.
        self.int8_weights: Int8Weights | None = {} if int8 else None
        self.bf16_weights: Bf16Weights = {}  # filled only where decode.precision takes bf16

    def glossary(self, entries: Iterable[tuple[str, str]] | Path | str) -> Glossary:
        """A glossary for this model's lines (`decoding/glossary.py`): (source, translation)
        pairs, or a file of them, matched as the model's text is written (pre-tokenized text's
        words all between spaces, `is_tokenized`), as `translate --glossary` matches them."""
        tokenized = is_tokenized(self.task.config)
        if isinstance(entries, Path | str):
            return Glossary.read(entries, tokenized)
        return Glossary(entries, tokenized)

    def keep_packed_weights(self) -> None:
        """Keep the weights packed for oneDNN from one call to the next, as a server wants: a
        copy of the model's float32 weights is held for the translator's lifetime."""
        self.packed_weights = {}

    @classmethod
    def load(
        cls,
        model: Path | str | Sequence[Path | str],
        checkpoint: Path | None = None,
        device: str | None = None,
        int8: bool = False,
    ) -> Translator:
        """A checkpoint file, or a run folder: its averaged model if there is one, else its
        newest checkpoint, or `checkpoint`. Several of them (a list): their ensemble
        (`models/ensemble.py`), with the first one's decoding settings and task.

        `int8`: the large products in int8 (CPU only; `models/int8.py`).
        """
        paths = model_paths(model)
        if not paths:
            raise ValueError("no model given: name a run folder or a checkpoint file")
        if checkpoint is not None and len(paths) > 1:
            raise ValueError(
                f"--checkpoint names one file, but {len(paths)} models were given: name each "
                "model's checkpoint file as its --model instead"
            )
        target = pick_device(device)
        if len(paths) == 1:  # one model decodes as itself, not as an ensemble of one
            saved = load_model(paths[0], checkpoint)
            network = saved.model
            logger.info("loaded %s (step %s) on %s", saved.path, saved.step, target)
        else:
            network, saved = load_ensemble(paths)
            names = ", ".join(str(path) for path in paths)
            logger.info("loaded an ensemble of %d models (%s) on %s", len(paths), names, target)
        config = saved.config
        return cls(network.to(target), saved.vocab, config.decode, target, config.task, int8)

    def translate(
        self,
        lines: list[str],
        decode: DecodeConfig | None = None,
        sampling: Sampling | None = None,
        prefixes: Sequence[str] | None = None,
        terms: Sequence[Sequence[str]] | None = None,
        avoid: Sequence[str] | None = None,
    ) -> list[list[tuple[str, float]]]:
        """For each line its n-best (text, score) pairs; an empty line translates to ''.

        `decode` replaces the run's own decoding settings (config.json's `decode`). `sampling`:
        samples drawn from the model instead (`decoding/sampling.py`), best score first; of
        `decode`, the length limits and the length penalty of the scores apply. `prefixes`: one
        per line ('' for none), the text every output of it must start with, its last word
        perhaps unfinished, completed by the search (`decoding/prefix.py`); the texts include it,
        the scores count its tokens. `terms`: one list of phrases per line ([] for none), each
        of which every output of it must hold, a glossary's translation say (lexically
        constrained decoding, `decoding/terms.py`; beam search only, at least
        `decode.terms_beam` wide for a line with terms). `avoid`: phrases no output may hold,
        for every line (a banned word; `decoding/avoid.py`).
        """
        found = self.hypotheses(lines, decode, sampling, prefixes, terms, avoid)
        return [[(text, h.score) for text, h in hyps] for hyps in found]

    def hypotheses(
        self,
        lines: list[str],
        decode: DecodeConfig | None = None,
        sampling: Sampling | None = None,
        prefixes: Sequence[str] | None = None,
        terms: Sequence[Sequence[str]] | None = None,
        avoid: Sequence[str] | None = None,
    ) -> list[list[tuple[str, Hypothesis]]]:
        """`translate` with each text's hypothesis (its token ids and scores); an empty line
        gives [('', Hypothesis([], 0.0, 0.0))]."""
        lines, decode = sentence_list(lines), decode or self.decode
        if not isinstance(decode, DecodeConfig):
            raise TypeError(f"decode must be a DecodeConfig, not {type(decode).__name__}")
        if sampling is not None and not isinstance(sampling, Sampling):
            raise TypeError(f"sampling must be a Sampling, not {type(sampling).__name__}")
        if decode.constrained and self.task.config.tags:  # the constraint knows XX, not POS tags
            raise ValueError("constrained search needs a model that writes XX for every tag "
                             "(data from `prepare ptb --no-tags`)")  # fmt: skip
        if decode.constrained and sampling:
            raise ValueError("sampling draws from the model alone: leave out constrained search")
        if decode.no_repeat_ngram and self.task.config.name != "translation":
            raise ValueError(NO_REPEATS_IN_TREES)
        if terms is not None and sampling:
            raise ValueError("sampling draws from the model alone: terms need beam search")
        sources = self.vocab.encode([line.strip() for line in lines])
        self._check_lengths(sources)
        todo = [i for i, line in enumerate(lines) if line.strip()]
        forced, held = self._prefixes(prefixes, lines), self._terms(terms, lines)
        self._check_guided_lengths(forced, held)
        hypotheses = decode_ids(
            self.model,
            self.vocab,
            [sources[i] for i in todo],
            decode,
            self.device,
            self.packed_weights,
            self.int8_weights,
            sampling,
            None if forced is None else [forced[i] for i in todo],
            None if held is None else [held[i] for i in todo],
            self._avoided(avoid, held),
            self.bf16_weights,
        )
        # Every hypothesis of every line through the task's post-processing at once.
        owners = [(i, h) for i, hyps in zip(todo, hypotheses, strict=True) for h in hyps]
        texts = self.vocab.decode([h.tokens for _, h in owners])
        texts = self.task.postprocess(texts, [lines[i].strip() for i, _ in owners])
        results: list[list[tuple[str, Hypothesis]]] = [
            [("", Hypothesis([], 0.0, 0.0))] for _ in lines
        ]
        for i in todo:
            results[i] = []
        for (i, h), text in zip(owners, texts, strict=True):
            results[i].append((text, h))
        return results

    def score(
        self, sources: Sequence[str], targets: Sequence[str], max_tokens: int = 4096
    ) -> list[TargetScore]:
        """The model's log-probability of each target given its source (`decoding/forced.py`):
        targets in the task's output format (a translation; a bracketed tree for a parser)."""
        sources, targets = sentence_list(sources, "sources"), sentence_list(targets, "targets")
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets: give one each")
        sources = [line.strip() for line in sources]
        source_ids = self.vocab.encode(sources)
        target_ids = self.vocab.encode(self.task.targets([t.strip() for t in targets], sources))
        self._check_lengths(source_ids)
        self._check_lengths(target_ids, "target")
        pairs = list(zip(source_ids, target_ids, strict=True))
        return score_ids(self.model, self.vocab, pairs, self.device, max_tokens)

    def _prefixes(self, prefixes: Sequence[str] | None, lines: list[str]) -> list[Prefix] | None:
        """Each line's prefix parsed, checked: one a line (an empty line's is not read: it
        translates to '')."""
        if prefixes is None:
            return None
        prefixes = sentence_list(prefixes, "prefixes")
        if len(prefixes) != len(lines):
            raise ValueError(f"{len(prefixes)} prefixes for {len(lines)} lines: give one a line "
                             "('' for none)")  # fmt: skip
        prefixes = [p if line.strip() else "" for p, line in zip(prefixes, lines, strict=True)]
        return parse_prefixes(self.vocab, prefixes, self.task.config)

    def _terms(self, terms: Sequence[Sequence[str]] | None, lines: list[str]) -> list[Terms] | None:
        """Each line's terms parsed, checked: a list a line (an empty line's are not read)."""
        if terms is None:
            return None
        if isinstance(terms, str) or len(terms) != len(lines):
            count = "a string" if isinstance(terms, str) else f"{len(terms)} term lists"
            raise ValueError(f"{count} for {len(lines)} lines: give a list of phrases a line "
                             "([] for none)")  # fmt: skip
        terms = [t if line.strip() else [] for t, line in zip(terms, lines, strict=True)]
        return parse_terms(self.vocab, terms, self.task.config)

    def _avoided(self, avoid: Sequence[str] | None, terms: list[Terms] | None) -> Terms | None:
        """The avoid list parsed, checked against the terms: none may hold an avoided phrase."""
        if avoid is None:
            return None
        avoided = parse_avoided(self.vocab, avoid, self.task.config)
        check_terms(avoided, terms or [], self.vocab)
        return avoided

    def _check_guided_lengths(self, prefixes: list[Prefix] | None, terms: list[Terms] | None):
        """A prefix and terms must fit the model's positions, with an EOS."""
        limit, lines = self.model.max_positions, len(prefixes or terms or [])
        for line in range(lines if limit is not None else 0):
            prefix = 0 if prefixes is None else prefixes[line].most_tokens
            held = 0 if terms is None else terms[line].tokens
            if prefix + held + 1 > limit:
                what = " and ".join(name for name, n in (("prefix", prefix), ("terms", held)) if n)
                raise ValueError(f"line {line + 1}: its {what} may take {prefix + held + 1} "
                                 f"subwords, past the model's max_positions={limit}")  # fmt: skip

    def _check_lengths(self, sequences: list[list[int]], side: str = "input") -> None:
        limit = self.model.max_positions
        if limit is None:
            return  # e.g. sinusoids extend to any length
        for line, ids in enumerate(sequences, start=1):
            if len(ids) + 1 > limit:
                raise ValueError(
                    f"{side} line {line}: {len(ids) + 1} subwords exceed the model's "
                    f"max_positions={limit}"
                )
