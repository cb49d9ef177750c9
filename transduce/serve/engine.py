"""The model behind the server and the work its decoding worker does: translate a group of
requests that share decoding settings in one `Translator` call, as `transduce translate` would,
score given targets as `transduce score` would, and capture one sentence's attention as the
attention views draw it.

`ModelFacts` is what the front of the server needs to check and describe requests without the
model: with the decoding worker in a process of its own (worker.py), only the facts cross over."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..config import DecodeConfig, TaskConfig
from ..data.bpe import Vocab
from ..decoding.avoid import check_terms, parse_avoided
from ..decoding.channel import rerank, scored_candidates
from ..decoding.prefix import parse_prefixes
from ..decoding.repeats import NO_REPEATS_IN_TREES
from ..decoding.sampling import Sampling
from ..decoding.terms import parse_terms
from ..decoding.translate import Translator
from ..models import bf16_decoding, count_parameters
from ..models.ensemble import AttendDifferently
from ..models.saved import given_paths, model_paths
from ..tasks.translation import TRANSLATION
from ..viz.alignment import align, default_layer, pharaoh
from ..viz.capture import attention_of_ids, best_translations
from ..viz.page import page_data


class BadRequest(ValueError):
    """The request cannot be served as asked (answered 422 with this message)."""


@dataclass(frozen=True)
class TranslateWork:
    lines: list[str]
    decode: DecodeConfig  # the key: requests with equal settings are decoded together
    alignments: bool
    prefixes: list[str] | None = None  # one a line, checked (`ModelFacts.guided_lengths`)
    sampling: Sampling | None = None  # such work comes alone: its seed draws its samples
    terms: list[list[str]] | None = None  # a list a line, checked as prefixes are
    channel_weight: float | None = None  # re-ranked by the reverse model (a key of the batch)
    avoid: tuple[str, ...] | None = None  # for every line (a key of the batch, too)


@dataclass(frozen=True)
class ScoreWork:
    sources: list[str]
    targets: list[str]


@dataclass(frozen=True)
class AttentionWork:
    text: str
    target: str | None
    decode: DecodeConfig
    merge_words: bool
    layer: int | None


@dataclass(frozen=True)
class ModelFacts:
    """The served model's name, description, vocabulary and decoding settings: enough to count a
    request's subwords, settle its decoding settings and describe the model (`GET /v1/models`)."""

    name: str
    description: dict
    vocab: Vocab
    decode: DecodeConfig  # the run's own
    max_positions: int | None
    attention_layers: int  # the deepest stack's: the attention views' layers 0 to this - 1
    # Why the model has no attention to show (an ensemble of models of different shapes), or None.
    no_attention: str | None = None
    task: TaskConfig = TRANSLATION
    channel: str | None = None  # the reverse model's name, for `channel_weight`; None: none

    def guided_lengths(
        self, prefixes: list[str] | None, terms: list[list[str]] | None
    ) -> list[int]:
        """The most subwords each line's output may need for its prefix and its terms with an
        EOS (`Prefix.most_tokens`, `Terms.tokens`), to be checked against the limits;
        BadRequest for a prefix no output can start with or a term none can hold (a parser's,
        or one with characters the vocabulary lacks). Both before the request is merged with
        others, whose decoding a failure would fail too."""
        try:
            starts = [0] * len(terms or []) if prefixes is None else [
                prefix.most_tokens for prefix in parse_prefixes(self.vocab, prefixes, self.task)
            ]  # fmt: skip
            held = [0] * len(starts) if terms is None else [
                t.tokens for t in parse_terms(self.vocab, terms, self.task)
            ]  # fmt: skip
        except ValueError as error:
            raise BadRequest(str(error)) from error
        return [start + tokens + 1 for start, tokens in zip(starts, held, strict=True)]

    def check_avoided(self, avoid: list[str], terms: list[list[str]] | None) -> None:
        """BadRequest for an avoid list that a parser's model was given, or that a term holds."""
        try:
            avoided = parse_avoided(self.vocab, avoid, self.task)
            check_terms(avoided, parse_terms(self.vocab, terms or [], self.task), self.vocab)
        except ValueError as error:
            raise BadRequest(str(error)) from error

    def check_attention(self) -> None:
        """BadRequest for attention (views, alignments) from a model that has none to show."""
        if self.no_attention is not None:
            raise BadRequest(self.no_attention)

    def check_layer(self, layer: int | None) -> None:
        """BadRequest for an attention layer the model does not have (or no attention at all)."""
        self.check_attention()
        if layer is not None and not 0 <= layer < self.attention_layers:
            last = self.attention_layers - 1
            raise BadRequest(f"layer {layer} out of range: the model has layers 0 to {last}")

    def token_counts(self, lines: list[str]) -> list[int]:
        """Each line's subwords with its EOS: the length the model reads."""
        return [len(ids) + 1 for ids in self.vocab.encode([s.strip() for s in lines])]

    def decode_config(
        self,
        beam_size: int | None,
        n_best: int,
        max_len_b: int | None,
        no_repeat_ngram: int | None = None,
        no_unk: bool | None = None,
    ) -> DecodeConfig:
        """The run's decoding settings with the request's; BadRequest if they do not fit."""
        # A beam asked for is the beam of sentences with terms too; else theirs is wider.
        given = {"beam_size": beam_size, "terms_beam": beam_size, "max_len_b": max_len_b}
        given["no_repeat_ngram"], given["no_unk"] = no_repeat_ngram, no_unk
        settings = {k: v for k, v in given.items() if v is not None}
        beam = settings.get("beam_size", self.decode.beam_size)
        if n_best > beam:
            raise BadRequest(f"n_best={n_best} exceeds the beam size {beam}")
        if no_repeat_ngram and self.task.name != "translation":
            raise BadRequest(NO_REPEATS_IN_TREES)
        return replace(self.decode, n_best=n_best, **settings)


class Engine:
    """A `Translator` with a name, for the server: the decoding worker's `translate` and
    `attention`, and the model's `facts`. `members`: the names of an ensemble's models."""

    def __init__(
        self,
        translator: Translator,
        name: str,
        members: Sequence[str] = (),
        reverse: Translator | None = None,
        reverse_name: str | None = None,
    ) -> None:
        """`reverse`: a model of the other direction, for noisy-channel re-ranking
        (`decoding/channel.py`), named `reverse_name`."""
        self.translator, self.name, self.members = translator, name, list(members)
        self.reverse, self.reverse_name = reverse, reverse_name or "reverse"
        translator.keep_packed_weights()  # request after request: not packed again for each
        layers, no_attention = self._attention_layers()
        self.facts = ModelFacts(
            name,
            self._describe(attention=no_attention is None),
            translator.vocab,
            translator.decode,
            self.max_positions,
            layers,
            no_attention,
            translator.task.config,
            None if reverse is None else self.reverse_name,
        )

    @classmethod
    def load(
        cls,
        model: Path | str | Sequence[Path | str],
        device: str | None = None,
        int8: bool = False,
        channel: Path | str | None = None,
        precision: str | None = None,
    ) -> Engine:
        """A run folder or a checkpoint file, named by its folder or file name; several of them,
        their ensemble (as `transduce translate --model A --model B`), named "A+B"; the folder of an
        ensemble trained at once (`train --members`), by its name. `channel`:
        a model of the reverse direction, for `channel_weight` (as `translate --channel`).
        `precision`: the search's products (`decode.precision`; None: the run's), checked now."""
        given = given_paths(model)
        paths = model_paths(given)
        translator = Translator.load(paths, device=device, int8=int8)
        if precision is not None:
            translator.decode = replace(translator.decode, precision=precision)
        bf16_decoding.chosen(translator.decode.precision, translator.device)  # refused at start
        names = [path.name for path in paths]
        one_folder = len(given) == 1 and len(paths) > 1  # `train --members`: member1, member2
        if len(set(names)) < len(names) or one_folder:  # runs/a/average.pt, runs/b/average.pt
            names = [f"{path.parent.name}/{path.name}" for path in paths]
        name = given[0].name if one_folder else "+".join(names)
        members = names if len(names) > 1 else ()
        if channel is None:
            return cls(translator, name, members)
        reverse = Translator.load(channel, device=device)
        reverse.keep_packed_weights()
        return cls(translator, name, members, reverse, Path(channel).name)

    def _attention_layers(self) -> tuple[int, str | None]:
        """The layers the attention views have, from one short sentence's attention
        (milliseconds), so that the server refuses a layer out of range before it decodes
        anything; or, for an ensemble whose models attend in different shapes, why it has none."""
        one_word = self.translator.vocab.encode(["a"])[0]
        try:
            attention = attention_of_ids(self.translator, one_word, one_word, merge_words=False)
        except AttendDifferently as different:
            return 0, str(different)
        return attention.n_layers, None

    @property
    def max_positions(self) -> int | None:
        return self.translator.model.max_positions

    def _describe(self, attention: bool) -> dict:
        """What `GET /v1/models` says of the model."""
        translator = self.translator
        described = {
            "name": self.name,
            "metric": translator.task.metric,  # the task's: bleu (translation), f1 (parsing)
            "vocab_size": translator.vocab.size,
            "parameters": count_parameters(translator.model),
            "max_positions": self.max_positions,
            "device": str(translator.device),
            "attention": attention,
            "decode": {
                "beam_size": translator.decode.beam_size,
                "alpha": translator.decode.alpha,
                "max_len_b": translator.decode.max_len_b,
                "n_best": translator.decode.n_best,
                "terms_beam": translator.decode.terms_beam,  # a text with terms: this beam
                "no_repeat_ngram": translator.decode.no_repeat_ngram,  # 0: repeats allowed
                "no_unk": translator.decode.no_unk,  # True: never the unknown token
            },
        }
        if self.members:  # an ensemble: its models, in the order their settings count
            described["members"] = self.members
        if self.reverse is not None:  # `channel_weight` re-ranks with it
            described["channel"] = self.reverse_name
        return described

    def translate(self, works: list[TranslateWork]) -> list[list[list[dict]]]:
        """Translate every request's lines in one call (they share `decode`); per request, per
        line, its n-best as {"text", "score"} and, if asked, "alignment" (Pharaoh). Alignments
        from a model with no attention to show fail the whole call: the route refuses them
        before requests are merged."""
        if any(work.alignments for work in works):
            self.facts.check_attention()  # as the route has, for a caller without one
        lines = [line for work in works for line in work.lines]
        prefixes = terms = None
        if any(work.prefixes for work in works):
            prefixes = [p for work in works for p in work.prefixes or [""] * len(work.lines)]
        if any(work.terms for work in works):
            terms = [t for work in works for t in work.terms or [[]] * len(work.lines)]
        if works[0].sampling is not None and len(works) > 1:
            raise BadRequest("sampled work is decoded alone, so that its seed draws its samples")
        decode, sampling, avoid = works[0].decode, works[0].sampling, works[0].avoid
        avoid = None if avoid is None else list(avoid)
        if works[0].channel_weight is not None:
            return self._reranked(works, lines, prefixes, terms, avoid)
        found = self.translator.hypotheses(lines, decode, sampling, prefixes, terms, avoid)
        results, start = [], 0
        for work in works:
            mine = found[start : start + len(work.lines)]
            start += len(work.lines)
            pairs = zip(work.lines, mine, strict=True)
            results.append([self._outputs(line, hyps, work) for line, hyps in pairs])
        return results

    def _reranked(self, works: list[TranslateWork], lines, prefixes, terms, avoid) -> list:
        """`translate` for works that share a channel weight (their batch's key): the beam's
        candidates re-ranked by score + weight * log P(line | candidate), as `translate
        --channel` ranks them; no alignments (the route refuses them)."""
        if self.reverse is None:
            raise BadRequest("this server has no channel model: start it with --channel")
        decode, weight = works[0].decode, works[0].channel_weight
        found = scored_candidates(self.translator, self.reverse, lines, decode, prefixes, terms,
                                  avoid)  # fmt: skip
        ranked = rerank(found, weight)
        results, start = [], 0
        for work in works:
            end = start + len(work.lines)
            mine = zip(ranked[start:end], found[start:end], strict=True)
            start = end
            results.append([self._ranked_outputs(hyps[: decode.n_best], kept, work)
                            for hyps, kept in mine])  # fmt: skip
        return results

    @staticmethod
    def _ranked_outputs(hyps: list, candidates: list, work: TranslateWork) -> list[dict]:
        """A line's re-ranked outputs; with terms, each candidate's count of terms it lacks (the
        same for all: only those lacking fewest are re-ranked)."""
        outputs = [{"text": text, "score": score} for text, score in hyps]
        if work.terms:
            missing = candidates[0][3] if candidates else 0
            for output in outputs:
                output["missing_terms"] = missing
        return outputs

    def _outputs(self, line: str, hypotheses: list, work: TranslateWork) -> list[dict]:
        outputs = [{"text": text, "score": h.score} for text, h in hypotheses]
        if work.terms:  # a candidate that lacks one ended at the length limit: say so
            for output, (_, h) in zip(outputs, hypotheses, strict=True):
                output["missing_terms"] = h.missing
        if work.alignments:
            src_ids = self.translator.vocab.encode([line.strip()])[0]
            for output, (_, h) in zip(outputs, hypotheses, strict=True):
                words = attention_of_ids(self.translator, src_ids, h.tokens, merge_words=True)
                output["alignment"] = pharaoh(align(words))
        return outputs

    def score(self, works: list[ScoreWork]) -> list[list[dict]]:
        """Every request's pairs scored in one call (`Translator.score`); per request, per pair,
        {"log_prob", "tokens", "per_token", "unknown"}. A target the task cannot read (a
        parser's malformed tree) fails the call: the route merges no parser's requests."""
        sources = [line for work in works for line in work.sources]
        targets = [line for work in works for line in work.targets]
        try:
            found = self.translator.score(sources, targets)
        except ValueError as error:  # a tree that is none, or over the model's positions
            raise BadRequest(str(error)) from error
        results, start = [], 0
        for work in works:
            mine = found[start : start + len(work.sources)]
            start += len(work.sources)
            results.append([{**asdict(s), "per_token": s.per_token} for s in mine])
        return results

    def attention(self, works: list[AttentionWork]) -> list[dict]:
        """Each sentence's attention as `page_data` writes it for the attention page."""
        return [self._attention(work) for work in works]

    def _attention(self, work: AttentionWork) -> dict:
        self.facts.check_layer(work.layer)  # as the route has, for a caller without one
        vocab = self.translator.vocab
        src_ids = vocab.encode([work.text.strip()])[0]
        if work.target is None:
            tgt_ids = best_translations(self.translator, [src_ids], work.decode)[0]
        else:
            tgt_ids = vocab.encode([work.target.strip()])[0]
        attention = attention_of_ids(self.translator, src_ids, tgt_ids, work.merge_words)
        layer = default_layer(attention.n_layers) if work.layer is None else work.layer
        return page_data(attention, layer)
