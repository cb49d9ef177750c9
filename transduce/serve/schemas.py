"""The JSON the API reads and writes, as pydantic models: FastAPI validates requests with them
(a wrong type, a missing or unknown field, an empty sentence: 422) and writes the OpenAPI schema
from them. Limits that depend on the server's settings are checked by the routes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from ..decoding.avoid import MAX_AVOIDED
from ..decoding.terms import MAX_TERMS


def _a_sentence(text: str) -> str:
    if not text.strip():
        raise ValueError("a sentence may not be empty or only spaces")
    return _unicode(text, "a sentence")


def _unicode(text: str, what: str = "a prefix") -> str:
    try:
        text.encode("utf-8")  # JSON's \ud800 escapes decode to lone surrogates, not Unicode
    except UnicodeEncodeError as error:
        raise ValueError(f"{what} must be valid Unicode (no lone surrogates)") from error
    return text


def _a_term(text: str) -> str:
    return _unicode(text, "a term")


Sentence = Annotated[StrictStr, AfterValidator(_a_sentence)]
Prefix = Annotated[StrictStr, AfterValidator(_unicode)]  # may be empty: no prefix
Term = Annotated[StrictStr, AfterValidator(_a_term)]  # a blank one is dropped
MAX_GLOSSARY = 5000  # entries a request: matching them is the server's work before decoding
Terms = Annotated[list[Term], Field(max_length=MAX_TERMS)]


class SamplingOptions(BaseModel):
    """Outputs drawn from the model's distribution instead of beam search's best, as
    `transduce translate --sampling` draws them: the same lines and seed, the same samples."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    samples: StrictInt = Field(1, ge=1, description="drawn per sentence, best score first")
    top_k: StrictInt = Field(0, ge=0, description="among the k likeliest tokens only; 0: all")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="the nucleus: tokens of this mass")
    temperature: float = Field(1.0, gt=0.0, description="below 1 sharper, above 1 flatter")
    seed: StrictInt = Field(0, ge=0, lt=2**63)


class TranslateRequest(BaseModel):
    """`text` (one sentence) or `texts` (several); unset options take the model's own."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    text: Sentence | None = Field(None, examples=["a dog runs across the grass ."])
    texts: list[Sentence] | None = Field(None, min_length=1)
    beam_size: StrictInt | None = Field(None, ge=1, description="1 is greedy search")
    n_best: StrictInt = Field(1, ge=1, description="hypotheses per sentence, at most beam_size")
    max_len_b: StrictInt | None = Field(None, ge=1, description="output <= input + max_len_b")
    no_repeat_ngram: StrictInt | None = Field(
        None,
        ge=0,
        description="no translation holds an n-gram of this many subwords twice: a weak "
        "model's loops cut (3 or 4 usual; 0: repeats allowed)",
    )
    no_unk: StrictBool | None = Field(
        None, description="never the unknown token ' ⁇ ' (where the vocabulary lacks a character)"
    )
    alignments: StrictBool = Field(False, description="Pharaoh word alignments of each output")
    prefix: Prefix | None = Field(
        None,
        description="with `text`: the text its translations must start with, the last word "
        "perhaps unfinished, completed by the model (interactive translation); the texts "
        "include it, the scores count it",
        examples=["ein kleiner"],
    )
    prefixes: list[Prefix] | None = Field(
        None, description="with `texts`: one prefix each, '' for none"
    )
    terms: Terms | None = Field(
        None,
        description="with `text`: phrases its translation must each hold as written, e.g. a "
        "glossary's translations (lexically constrained beam search; a wider beam places them "
        f"better); at most {MAX_TERMS}",
        examples=[["Hund"]],
    )
    term_lists: list[Terms] | None = Field(
        None, description="with `texts`: one list of terms each, [] for none"
    )
    avoid: list[Term] | None = Field(
        None,
        max_length=MAX_AVOIDED,
        description="phrases no translation may hold, for every text (a banned word; its "
        "tokens as the vocabulary encodes it alone never come in a row; in running text of a "
        "script without spaces, its characters in any pieces)",
        examples=[["Sie"]],
    )
    glossary: dict[Term, Term] | None = Field(
        None,
        description="source phrase -> its translation: each text that uses a source phrase "
        f"(whole words, any case) gets the translation as a term; at most {MAX_GLOSSARY} entries",
        examples=[{"dog": "Hund"}],
    )
    sampling: SamplingOptions | None = Field(
        None, description="draw samples instead of searching (back-translation, diverse outputs)"
    )
    channel_weight: float | None = Field(
        None,
        ge=0.0,
        description="re-rank the beam's candidates by score + weight * log P(source | "
        "candidate) with the server's reverse model (`serve --channel`; noisy channel, Yee et "
        "al. 2019; 0.1 chosen on Multi30k's dev set)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TranslateRequest:
        """One of `text` and `texts`, the prefixes that go with it, sampling without the beam's
        options."""
        if self.text is not None and self.texts is not None:
            raise ValueError("give either `text` (one sentence) or `texts` (a list), not both")
        if self.text is None and self.texts is None:
            raise ValueError("give `text` (one sentence) or `texts` (a list)")
        if self.prefix is not None and self.text is None:
            raise ValueError("`prefix` goes with `text`; with `texts`, give `prefixes`")
        if self.sampling is not None and (self.beam_size is not None or self.n_best != 1):
            raise ValueError("`beam_size` and `n_best` are beam search's; with `sampling`, "
                             "`sampling.samples` counts the outputs")  # fmt: skip
        if self.sampling is not None and self.alignments:
            raise ValueError("`alignments` come with beam search's best: leave out `sampling`")
        if self.channel_weight is not None and (self.sampling is not None or self.alignments):
            raise ValueError("`channel_weight` re-ranks the beam's candidates: leave out "
                             "`sampling` and `alignments`")  # fmt: skip
        if self.terms is not None and self.text is None:
            raise ValueError("`terms` go with `text`; with `texts`, give `term_lists`")
        if self.sampling is not None and (self.term_lines is not None or self.glossary):
            raise ValueError("terms and glossaries need beam search: leave out `sampling`")
        if self.glossary is not None and len(self.glossary) > MAX_GLOSSARY:
            raise ValueError(f"a glossary of {len(self.glossary)} entries: at most "
                             f"{MAX_GLOSSARY}")  # fmt: skip
        for name, each in (("prefixes", self.prefixes), ("term_lists", self.term_lists)):
            if each is None:
                continue
            if self.texts is None:
                alone = "prefix" if name == "prefixes" else "terms"
                raise ValueError(f"`{name}` go with `texts`; with `text`, give `{alone}`")
            if len(each) != len(self.texts):
                raise ValueError(f"{len(each)} {name} for {len(self.texts)} texts: give one "
                                 "each ('' or [] for none)")  # fmt: skip
        return self

    @property
    def lines(self) -> list[str]:
        return [self.text] if self.text is not None else list(self.texts or [])

    @property
    def prefix_lines(self) -> list[str] | None:
        """One prefix a line, or None when no line has one."""
        prefixes = [self.prefix] if self.prefix is not None else self.prefixes
        return list(prefixes) if prefixes and any(p.strip() for p in prefixes) else None

    @property
    def term_lines(self) -> list[list[str]] | None:
        """One list of terms a line, or None when no line has a term."""
        lists = [self.terms] if self.terms is not None else self.term_lists
        given = lists and any(t.strip() for terms in lists for t in terms)
        return [list(terms) for terms in lists] if given else None


class Candidate(BaseModel):
    text: str
    score: float = Field(description="log P / length penalty, as beam search ranks it")
    alignment: str | None = Field(None, description="'0-0 1-2 ...': source-target word pairs")
    missing_terms: int | None = Field(
        None, description="with terms: how many it lacks (ended by the length limit; 0 else)"
    )


class Translation(BaseModel):
    text: str = Field(description="the best translation")
    score: float
    alignment: str | None = None
    missing_terms: int | None = None
    n_best: list[Candidate] = Field(description="the n best, best first (the first is the above)")


class TranslateResponse(BaseModel):
    model: str
    translations: list[Translation] = Field(description="one per sentence, in request order")
    time_ms: float = Field(description="from the request's arrival to its answer")


class ScorePair(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: Sentence = Field(examples=["a dog runs across the grass ."])
    target: Sentence = Field(description="a translation; for a parser, a bracketed tree")


class ScoreRequest(BaseModel):
    """Pairs to score: the model's log-probability of each target given its source."""

    model_config = ConfigDict(extra="forbid")

    pairs: list[ScorePair] = Field(min_length=1)


class PairScore(BaseModel):
    log_prob: float = Field(description="log P(target | source), natural log, EOS included")
    tokens: int = Field(description="the target's subwords and its EOS")
    per_token: float = Field(description="log_prob / tokens")
    unknown: int = Field(description="target subwords the vocabulary lacks (scored as <unk>)")


class ScoreResponse(BaseModel):
    model: str
    scores: list[PairScore] = Field(description="one per pair, in request order")
    time_ms: float


class AttentionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: Sentence
    target: Sentence | None = Field(None, description="default: the model's own translation")
    beam_size: StrictInt | None = Field(None, ge=1)
    merge_words: StrictBool = Field(True, description="sub-words merged into words")
    layer: StrictInt | None = Field(None, ge=0, description="the layer shown first")


class View(BaseModel):
    queries: list[str]
    keys: list[str]
    queryName: str  # the attention page's names
    keyName: str
    layers: list[list[list[list[float]]]] = Field(description="[layer][head][query][key]")


class AttentionResponse(BaseModel):
    model: str
    source: str
    translation: str
    layer: int
    views: dict[Literal["encoder", "decoder", "cross"], View]
    time_ms: float


class ModelInfo(BaseModel):
    name: str
    metric: str
    vocab_size: int
    parameters: int
    max_positions: int | None
    device: str
    decode: dict[str, float | int]
    attention: bool = Field(
        description="whether /v1/attention and alignments are served: not for an ensemble of "
        "models that attend in different shapes"
    )
    members: list[str] | None = Field(
        None, description="an ensemble's models (their mean next-token probability decodes)"
    )
    channel: str | None = Field(
        None, description="the reverse model that `channel_weight` re-ranks with (`--channel`)"
    )


class ModelList(BaseModel):
    models: list[ModelInfo]


class Health(BaseModel):
    status: Literal["ok"]
    model: str
    queued_sentences: int


class Problem(BaseModel):
    """Every error's body."""

    detail: str
    errors: list[dict] | None = Field(None, description="for 422: each field's problem")
