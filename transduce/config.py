"""One typed configuration for a run: model (s3), data, training (s5), decoding (s6.1), task.

`Config(model, data, train, decode, task)` is a tree of frozen dataclasses. The model section is a
tagged union: its `family` field names the model family ("transformer", "rnn") and so which
dataclass holds the rest of the section. Overrides such as `train.max_steps=2000` go through
`override`, type-checked against the section's dataclass; unknown keys are errors. The presets
(`base()`, `big()`, `table3("B", 1)`, ...) live in presets.py.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path

from .typed import ConfigError, check_types

POSITIONS = ("sinusoidal", "learned")
# The model settings' dropout rates: the Transformer's three; a recurrent model has the first.
DROPOUT_RATES = ("dropout", "attention_dropout", "relu_dropout")
SCHEDULES = ("noam", "constant", "plateau")
# "auto": bf16 where it gains: training's (models/bf16.py), decoding's (models/bf16_decoding.py)
PRECISIONS = ("auto", "fp32", "bf16")
CELLS = ("lstm", "gru")
SCORES = ("dot", "general", "concat", "additive")  # Luong et al. 2015's three; Bahdanau et al.'s
DECODER_INITS = ("zero", "bridge")
TOKENIZERS = ("13a", "none", "intl", "char", "zh")  # sacreBLEU's: tasks/translation.py


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass(frozen=True)
class TransformerConfig:
    """The Transformer's architecture (s3). Names follow the paper; `vocab_size` comes from data."""

    family: str = "transformer"
    n_layers: int = 6  # N, for the encoder and the decoder stack alike
    # The decoder's N where not the encoder's (0: the same, as the paper). A deep encoder and a
    # shallow decoder (Kasai et al. 2021) decode faster: 7+2 1.34x `demo`'s 4+4, 1.6 BLEU lower.
    n_decoder_layers: int = 0
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    d_k: int = 64
    d_v: int = 64
    dropout: float = 0.1  # P_drop: residual and embedding dropout (s5.4)
    attention_dropout: float = 0.0  # on the attention weights; the paper uses none
    relu_dropout: float = 0.0  # on the FFN's hidden ReLU units (tensor2tensor's); the paper: none
    positions: str = "sinusoidal"  # or "learned" (Table 3 row E)
    max_positions: int = 1024  # table size of learned positions; a limit on sentence length
    pre_norm: bool = False  # paper is post-norm: LayerNorm(x + Sublayer(x))
    share_embeddings: bool = True  # one matrix for source and target tokens (joint BPE)
    tie_output: bool = True  # the pre-softmax projection shares the target embedding (s3.4)
    vocab_size: int = 0  # 0 until the data is known; set by training from the vocabulary

    def __post_init__(self) -> None:
        check_types(self, "model")
        _require(self.family == "transformer", "model.family of a TransformerConfig is transformer")
        for name in ("n_layers", "d_model", "d_ff", "h", "d_k", "d_v", "max_positions"):
            _require(getattr(self, name) > 0, f"model.{name} must be positive")
        for name in DROPOUT_RATES:
            _require(0.0 <= getattr(self, name) < 1.0, f"model.{name} must be in [0, 1)")
        _require(self.positions in POSITIONS, f"model.positions must be one of {POSITIONS}")
        _require(self.vocab_size >= 0, "model.vocab_size must be >= 0")
        _require(self.n_decoder_layers >= 0, "model.n_decoder_layers must be >= 0 (0: n_layers)")

    @property
    def decoder_depth(self) -> int:
        """The number of decoder layers: `n_decoder_layers`, or N when that is 0."""
        return self.n_decoder_layers or self.n_layers


@dataclass(frozen=True)
class RnnConfig:
    """The recurrent attention baseline (Luong et al. 2015; Bahdanau et al. 2015).

    Encoder h_i = RNN(Emb(x_i), h_{i-1}); decoder h'_j = RNN(Emb(y_{j-1}), h'_{j-1}); attention
    alpha_ij = softmax_i(score(h_i, h'_j)), c_j = sum_i alpha_ij h_i; h~'_j = tanh(W_c [c_j; h'_j]
    + b_c); y_j = softmax(W_o h~'_j + b_o). `d_model` is the hidden size of every recurrent layer
    (of each direction in a bidirectional encoder), so a bidirectional h_i has 2 d_model entries.
    """

    family: str = "rnn"
    cell: str = "lstm"  # or "gru"
    n_layers: int = 4  # recurrent layers, for the encoder and the decoder alike
    d_model: int = 1000  # hidden size
    d_embed: int = 1000  # Emb(x) and Emb(y)
    bidirectional: bool = False  # encoder h_i = [forward h_i; backward h_i]
    memory_projection: bool = False  # h_i := W_p h_i, bringing a bidirectional h_i to d_model
    score: str = "general"  # dot | general | concat (Luong) | additive (Bahdanau's wiring)
    input_feeding: bool = True  # h~'_{j-1} joins the decoder's input (Luong s3.3)
    decoder_init: str = "zero"  # or "bridge": h'_0 = tanh(W_b [encoder's last states] + b_b)
    dropout: float = 0.2  # on embeddings, between recurrent layers, and on h~'_j
    share_embeddings: bool = False  # one matrix for source and target tokens (joint BPE)
    tie_output: bool = False  # W_o is the target embedding (needs d_embed == d_model)
    vocab_size: int = 0  # 0 until the data is known; set by training from the vocabulary

    @property
    def d_memory(self) -> int:
        """The size of the encoder's h_i, what the decoder attends to."""
        return self.d_model * (2 if self.bidirectional and not self.memory_projection else 1)

    def __post_init__(self) -> None:
        check_types(self, "model")
        _require(self.family == "rnn", "model.family of an RnnConfig is rnn")
        _require(self.cell in CELLS, f"model.cell must be one of {CELLS}, not {self.cell!r}")
        _require(self.score in SCORES, f"model.score must be one of {SCORES}, not {self.score!r}")
        _require(self.decoder_init in DECODER_INITS, f"model.decoder_init: one of {DECODER_INITS}")
        for name in ("n_layers", "d_model", "d_embed"):
            _require(getattr(self, name) > 0, f"model.{name} must be positive")
        _require(0.0 <= self.dropout < 1.0, "model.dropout must be in [0, 1)")
        _require(self.vocab_size >= 0, "model.vocab_size must be >= 0")
        _require(
            self.score != "dot" or self.d_memory == self.d_model,
            f"model.score=dot compares h'_j (d_model={self.d_model}) with h_i directly, but the "
            f"bidirectional encoder's h_i has {self.d_memory} entries: set "
            "model.memory_projection=true, or a score with its own weights (general, concat)",
        )
        _require(
            not (self.score == "additive" and self.input_feeding),
            "model.input_feeding: the additive score's Bahdanau wiring feeds the context c_j into "
            "the recurrent step already; set model.input_feeding=false",
        )
        tied_fits = not self.tie_output or self.d_embed == self.d_model
        _require(tied_fits, "model.tie_output needs d_embed == d_model (W_o is the embedding)")


# The model section's dataclass for each `model.family`. Every family has `d_model` (the width
# the eq. 3 schedule scales by) and `vocab_size`.
MODEL_FAMILIES: dict[str, type] = {"transformer": TransformerConfig, "rnn": RnnConfig}
ModelConfig = TransformerConfig | RnnConfig  # the union of MODEL_FAMILIES' classes


@dataclass(frozen=True)
class DataConfig:
    """Batching (s5.1), and BPE-dropout. The vocabulary and length filters are fixed earlier, by
    `prepare`."""

    max_tokens: int = 25000  # per batch and per side, in subword tokens, padding counted (s5.1)
    bucket_width: int = 1  # sentences of similar length share a batch: lengths rounded to this
    # Each batch's sources of one length: no source padding, so attention goes without a mask
    # on a GPU (`training.loss.MASK_FREE_DEVICES`); a length's last sentences, under half a
    # batch, join the next length's batch. On in the paper's presets (`base`, `big`, Table 3's
    # rows); off elsewhere: on the CPU no gain (SPEED.md, session 29)
    one_source_length: bool = False
    # BPE-dropout (Provilkov et al. 2020): the chance each merge is skipped when the training
    # text is segmented afresh for each epoch (data/epochs.py); 0 = `prepare`'s segmentation.
    bpe_dropout: float = 0.0

    def __post_init__(self) -> None:
        check_types(self, "data")
        _require(self.max_tokens > 0, "data.max_tokens must be positive")
        _require(self.bucket_width > 0, "data.bucket_width must be positive")
        _require(0 <= self.bpe_dropout < 1, "data.bpe_dropout must be in [0, 1)")


@dataclass(frozen=True)
class TrainConfig:
    """The optimiser, schedule and regularisation of s5.3-5.4, and the run's bookkeeping."""

    schedule: str = "noam"  # eq. 3 (warmup, then step^-0.5); "constant" at `lr`; or "plateau"
    warmup_steps: int = 4000
    lr_scale: float = 1.0  # multiplies eq. 3; the paper's value is 1
    lr: float = 1e-3  # the rate of the constant schedule; the first rate of "plateau"
    plateau_factor: float = 0.5  # "plateau": the rate times this ...
    plateau_patience: int = 5  # ... after this many validations in a row without a lower dev loss
    min_lr: float = 0.0  # "plateau" never goes below this rate
    # The last fraction of the run's budget (steps, epochs or minutes, whichever ends it first)
    # over which the rate falls linearly to 0; 0 = none, the paper's schedule to the end.
    cooldown: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0 = no clipping, as the paper
    label_smoothing: float = 0.1
    # Late dropout (Liu et al. 2023): this many first updates train without the model's dropout,
    # which only slows a young model and keeps an older one from overfitting a small corpus.
    late_dropout: int = 0
    # R-Drop (Liang et al. 2021; training/rdrop.py): two passes under independent dropout, the
    # loss plus alpha/2 times their symmetric KL; `rdrop` = alpha (5 for IWSLT). 0 = off (s5.4).
    rdrop: float = 0.0
    # This many first updates train without R-Drop (never while late dropout holds dropout off).
    rdrop_after: int = 0
    # Bidirectional training (Ding et al. 2021): the epochs begun in this first fraction of the
    # budget train on the pairs both ways, target -> source too, then source -> target alone.
    both_ways: float = 0.0
    accumulate: int = 1  # batches per update: 8 imitates the paper's 8 devices on one
    max_steps: int = 100000  # updates; the base model trains 100k (s5.2)
    max_epochs: int = 0  # 0 = no limit
    max_minutes: float = 0.0  # 0 = no limit
    valid_every: int = 1000  # updates between validations and checkpoints
    log_every: int = 100  # updates between lines of log.jsonl
    valid_bleu: bool = True  # also decode the dev set and score it with the task's metric
    valid_beam: int = 1  # beam for that score; 1 (greedy) keeps validation cheap
    keep_last: int = 5  # checkpoints kept besides the best; the paper averages the last 5 / 20
    average_last: int = 5  # how many of the last, after warmup, make the final `average.pt`
    # A saved model whose weights start the run, not its optimiser (training/warm_start.py)
    init_from: str = ""
    seed: int = 1
    precision: str = "auto"  # PRECISIONS; auto: bf16 on a GPU or a bf16 CPU (models/bf16.py)
    threads: int = 0  # CPU threads; 0 = torch's default
    # torch.compile the layers and the loss for training (training/compiled.py): "auto" on a GPU
    # only, "on" on any device, or "off"
    compile: str = "auto"

    def __post_init__(self) -> None:
        check_types(self, "train")
        _require(self.schedule in SCHEDULES, f"train.schedule must be one of {SCHEDULES}")
        _require(self.warmup_steps > 0, "train.warmup_steps must be positive")
        _require(self.lr_scale > 0, "train.lr_scale must be positive")
        _require(self.lr > 0, "train.lr must be positive")
        _require(0 < self.plateau_factor < 1, "train.plateau_factor must be in (0, 1)")
        _require(self.plateau_patience > 0, "train.plateau_patience must be positive")
        _require(0 <= self.min_lr <= self.lr, "train.min_lr must be in [0, train.lr]")
        _require(0.0 <= self.cooldown <= 1.0, "train.cooldown must be in [0, 1]")
        _require(0.0 <= self.label_smoothing < 1.0, "train.label_smoothing must be in [0, 1)")
        _require(self.late_dropout >= 0, "train.late_dropout must be >= 0 (0: dropout throughout)")
        _require(0.0 <= self.rdrop < float("inf"), "train.rdrop must be >= 0 and finite (0: off)")
        _require(self.rdrop_after >= 0, "train.rdrop_after must be >= 0 (0: from the start)")
        _require(self.rdrop > 0 or not self.rdrop_after, "train.rdrop_after needs train.rdrop > 0")
        _require(0.0 <= self.both_ways < 1.0, "train.both_ways must be in [0, 1) (0: one way)")
        _require(self.accumulate > 0, "train.accumulate must be positive")
        _require(self.max_steps > 0, "train.max_steps must be positive")
        _require(self.max_epochs >= 0, "train.max_epochs must be >= 0 (0: no limit)")
        _require(self.max_minutes >= 0, "train.max_minutes must be >= 0 (0: no limit)")
        _require(self.valid_every > 0, "train.valid_every must be positive")
        _require(self.log_every > 0, "train.log_every must be positive")
        _require(self.valid_beam > 0, "train.valid_beam must be positive")
        _require(self.keep_last > 0, "train.keep_last must be positive")
        last = self.average_last
        _require(0 < last <= self.keep_last, "train.average_last must be in 1..train.keep_last")
        _require(self.precision in PRECISIONS, f"train.precision must be one of {PRECISIONS}")
        _require(self.compile in ("auto", "on", "off"), "train.compile must be auto, on or off")


@dataclass(frozen=True)
class DecodeConfig:
    """Beam search as in s6.1: beam 4, length penalty 0.6, max length input + 50."""

    beam_size: int = 4
    alpha: float = 0.6  # GNMT length penalty ((5 + |Y|) / 6) ** alpha
    max_len_a: float = 1.0  # a hypothesis may have at most a * source length + b tokens
    max_len_b: int = 50
    n_best: int = 1
    batch_size: int = 64  # sentences per decoding batch
    constrained: bool = False  # parsing: only trees of the input's words (decoding/constraints)
    terms_beam: int = 8  # the least beam for a sentence with terms (decoding/terms.py)
    no_repeat_ngram: int = 0  # no n-gram of this many tokens twice (decoding/repeats.py); 0: off
    no_unk: bool = False  # never the unknown token (" ⁇ ": a character the vocabulary lacks)
    precision: str = "auto"  # PRECISIONS, of the search's products on a CPU; `score` keeps fp32
    workers: int = 0  # CPU processes taking batches in turn (decoding/workers.py); 0: a thread each

    def __post_init__(self) -> None:
        check_types(self, "decode")
        _require(self.beam_size > 0, "decode.beam_size must be positive")
        _require(0 <= self.alpha < float("inf"), "decode.alpha must be >= 0 and finite")
        _require(0 <= self.max_len_a < float("inf"), "decode.max_len_a must be >= 0 and finite")
        _require(self.max_len_b > 0, "decode.max_len_b must be positive")
        _require(0 < self.n_best <= self.beam_size, "decode.n_best must be in 1..beam_size")
        _require(self.batch_size > 0, "decode.batch_size must be positive")
        _require(self.no_repeat_ngram >= 0, "decode.no_repeat_ngram must be >= 0 (0: off)")
        _require(self.precision in PRECISIONS, f"decode.precision must be one of {PRECISIONS}")
        _require(self.workers >= 0, "decode.workers must be >= 0 (0: one per thread torch runs)")


@dataclass(frozen=True)
class TaskConfig:
    """What the model is trained to do and how its output is scored (tasks/).

    Set by `prepare` from the corpus and copied into the run by training. For translation,
    `tokenize` and `lowercase` are sacreBLEU's: "13a" and cased for raw text; "none" and
    lowercased for pre-tokenized text, as results published on such text are scored. For
    parsing (s6.3), `tags`: the linearised trees keep the POS tags, or write `XX` for each.
    """

    name: str = "translation"
    tokenize: str = "13a"
    lowercase: bool = False
    tags: bool = True

    def __post_init__(self) -> None:
        check_types(self, "task")
        _require(self.name in TASKS, f"task.name must be one of {TASKS}")
        _require(self.tokenize in TOKENIZERS, f"task.tokenize must be one of {TOKENIZERS}")


TASKS = ("translation", "parse")


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=TransformerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    task: TaskConfig = field(default_factory=TaskConfig)

    def __post_init__(self) -> None:  # each section of its class (each checks its own types)
        for name, kind in {**_SECTIONS, "model": (TransformerConfig, RnnConfig)}.items():
            part = getattr(self, name)
            _require(isinstance(part, kind), f"{name}: not a config section: {part!r}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, tree: dict) -> Config:
        """Read a tree as `to_json` writes it; a section left out takes its defaults (a model
        section without `family`, written before it was tagged: a Transformer)."""
        unknown = set(tree) - set(_SECTIONS)
        _require(not unknown, f"unknown config sections: {sorted(unknown)}")
        parts = {name: _section(name, values) for name, values in tree.items()}
        return cls(**parts)

    @classmethod
    def load(cls, path: str | Path) -> Config:
        return cls.from_dict(json.loads(Path(path).read_text()))


_SECTIONS = {
    "model": None,  # chosen by `family`
    "data": DataConfig,
    "train": TrainConfig,
    "decode": DecodeConfig,
    "task": TaskConfig,
}


def _section_class(name: str, values: dict) -> type:
    if name != "model":
        return _SECTIONS[name]
    family = values.get("family", "transformer")
    _require(family in MODEL_FAMILIES, f"model.family must be one of {sorted(MODEL_FAMILIES)}")
    return MODEL_FAMILIES[family]


def _section(name: str, values: dict) -> object:
    _require(isinstance(values, dict), f"config section {name!r} must be a mapping")
    section_cls = _section_class(name, values)
    names = {f.name for f in dataclasses.fields(section_cls)}
    bad = set(values) - names
    _require(not bad, f"unknown config keys: {sorted(f'{name}.{k}' for k in bad)}")
    return section_cls(**values)


def override(config: Config, assignments: dict[str, object]) -> Config:
    """Apply `{"train.max_steps": 2000, ...}`; strings are parsed to the field's type.

    Each section's changes are applied together, so checks across fields see the final values.
    A new `model.family` starts its section from that family's defaults (vocab_size kept).
    """
    changes: dict[str, dict[str, object]] = {}
    for key, raw in assignments.items():
        section_name, _, name = key.partition(".")
        _require(section_name in _SECTIONS and bool(name), f"unknown config key: {key}")
        changes.setdefault(section_name, {})[name] = raw
    sections = {}
    for section_name, raw_values in changes.items():
        current = getattr(config, section_name)
        if section_name == "model" and "family" in raw_values:
            family = _coerce("model.family", raw_values["family"], str)
            if family != current.family:
                current = _section("model", {"family": family, "vocab_size": current.vocab_size})
        hints = typing.get_type_hints(type(current))
        values = {}
        for name, raw in raw_values.items():
            _require(name in hints, f"unknown config key: {section_name}.{name}")
            values[name] = _coerce(f"{section_name}.{name}", raw, hints[name])
        sections[section_name] = dataclasses.replace(current, **values)
    return dataclasses.replace(config, **sections)


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`["train.max_steps=2000"]` -> `{"train.max_steps": "2000"}`."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        _require(bool(sep) and bool(key), f"expected key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _coerce(key: str, raw: object, kind: object) -> object:
    if not isinstance(raw, str):
        ok = isinstance(raw, kind) or (kind is float and isinstance(raw, int))
        _require(ok and not (kind is not bool and isinstance(raw, bool)), f"{key}: expected {kind}")
        return kind(raw)
    try:
        if kind is bool:
            _require(raw.lower() in ("true", "false", "1", "0"), f"{key}: expected true/false")
            return raw.lower() in ("true", "1")
        return kind(raw)
    except ValueError as error:
        raise ConfigError(f"{key}: cannot read {raw!r} as {kind.__name__}") from error
