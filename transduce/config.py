"""One typed configuration for a run: model (s3), data, training (s5) and decoding (s6.1).

`Config(model, data, train, decode)` is a tree of frozen dataclasses. Presets are functions named
after the paper (`base()`, `big()`, `table3("B", 1)`), each written out in full. Overrides such as
`train.max_steps=2000` go through `override`, type-checked; unknown keys are errors.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

POSITIONS = ("sinusoidal", "learned")


@dataclass(frozen=True)
class ModelConfig:
    """The architecture (s3). Names follow the paper; `vocab_size` comes from the data."""

    n_layers: int = 6  # N, for the encoder and the decoder stack alike
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    d_k: int = 64
    d_v: int = 64
    dropout: float = 0.1  # P_drop: residual and embedding dropout (s5.4)
    attention_dropout: float = 0.0  # on the attention weights; the paper uses none
    positions: str = "sinusoidal"  # or "learned" (Table 3 row E)
    max_positions: int = 1024  # table size of learned positions; a limit on sentence length
    pre_norm: bool = False  # paper is post-norm: LayerNorm(x + Sublayer(x))
    share_embeddings: bool = True  # one matrix for source and target tokens (joint BPE)
    tie_output: bool = True  # the pre-softmax projection shares the target embedding (s3.4)
    vocab_size: int = 0  # 0 until the data is known; set by training from the vocabulary

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "d_ff", "h", "d_k", "d_v", "max_positions"):
            _require(getattr(self, name) > 0, f"model.{name} must be positive")
        for name in ("dropout", "attention_dropout"):
            _require(0.0 <= getattr(self, name) < 1.0, f"model.{name} must be in [0, 1)")
        _require(self.positions in POSITIONS, f"model.positions must be one of {POSITIONS}")
        _require(self.vocab_size >= 0, "model.vocab_size must be >= 0")


@dataclass(frozen=True)
class DataConfig:
    """Batching (s5.1). The vocabulary and length filters are fixed earlier, by `prepare`."""

    max_tokens: int = 25000  # per batch and per side, in subword tokens, padding counted (s5.1)
    bucket_width: int = 1  # sentences of similar length share a batch: lengths rounded to this

    def __post_init__(self) -> None:
        _require(self.max_tokens > 0, "data.max_tokens must be positive")
        _require(self.bucket_width > 0, "data.bucket_width must be positive")


@dataclass(frozen=True)
class TrainConfig:
    """The optimiser, schedule and regularisation of s5.3-5.4, and the run's bookkeeping."""

    warmup_steps: int = 4000
    lr_scale: float = 1.0  # multiplies eq. 3; the paper's value is 1
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0 = no clipping, as the paper
    label_smoothing: float = 0.1
    accumulate: int = 1  # batches per update: 8 imitates the paper's 8 devices on one
    max_steps: int = 100000  # updates; the base model trains 100k (s5.2)
    max_epochs: int = 0  # 0 = no limit
    max_minutes: float = 0.0  # 0 = no limit
    valid_every: int = 1000  # updates between validations and checkpoints
    log_every: int = 100  # updates between lines of log.jsonl
    valid_bleu: bool = True  # also decode the dev set and score BLEU at each validation
    valid_beam: int = 1  # beam for that BLEU; 1 (greedy) keeps validation cheap
    keep_last: int = 5  # checkpoints kept besides the best; the paper averages the last 5 / 20
    average_last: int = 5  # how many of the last, after warmup, make the final `average.pt`
    seed: int = 1
    precision: str = "auto"  # "auto": bf16 autocast on a GPU, float32 on a CPU; or "fp32"
    threads: int = 0  # CPU threads; 0 = torch's default

    def __post_init__(self) -> None:
        _require(self.warmup_steps > 0, "train.warmup_steps must be positive")
        _require(self.lr_scale > 0, "train.lr_scale must be positive")
        _require(0.0 <= self.label_smoothing < 1.0, "train.label_smoothing must be in [0, 1)")
        _require(self.accumulate > 0, "train.accumulate must be positive")
        _require(self.max_steps > 0, "train.max_steps must be positive")
        _require(self.valid_every > 0, "train.valid_every must be positive")
        _require(self.log_every > 0, "train.log_every must be positive")
        _require(self.valid_beam > 0, "train.valid_beam must be positive")
        _require(self.keep_last > 0, "train.keep_last must be positive")
        _require(
            0 < self.average_last <= self.keep_last,
            "train.average_last must be in 1..train.keep_last",
        )
        _require(self.precision in ("auto", "fp32"), "train.precision must be auto or fp32")

    def peak_lr(self, d_model: int) -> float:
        """The largest learning rate of eq. 3, reached at step == warmup_steps."""
        return self.lr_scale * d_model**-0.5 * self.warmup_steps**-0.5


@dataclass(frozen=True)
class DecodeConfig:
    """Beam search as in s6.1: beam 4, length penalty 0.6, max length input + 50."""

    beam_size: int = 4
    alpha: float = 0.6  # GNMT length penalty ((5 + |Y|) / 6) ** alpha
    max_len_a: float = 1.0  # a hypothesis may have at most a * source length + b tokens
    max_len_b: int = 50
    n_best: int = 1
    batch_size: int = 64  # sentences per decoding batch

    def __post_init__(self) -> None:
        _require(self.beam_size > 0, "decode.beam_size must be positive")
        _require(self.alpha >= 0, "decode.alpha must be >= 0")
        _require(self.max_len_a >= 0 and self.max_len_b > 0, "decode.max_len_b must be positive")
        _require(0 < self.n_best <= self.beam_size, "decode.n_best must be in 1..beam_size")
        _require(self.batch_size > 0, "decode.batch_size must be positive")


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, tree: dict) -> Config:
        sections = {f.name: f.type for f in dataclasses.fields(cls)}
        unknown = set(tree) - set(sections)
        _require(not unknown, f"unknown config sections: {sorted(unknown)}")
        parts = {}
        for name, value in tree.items():
            section_cls = _SECTION_CLASSES[name]
            names = {f.name for f in dataclasses.fields(section_cls)}
            bad = set(value) - names
            _require(not bad, f"unknown config keys: {sorted(f'{name}.{k}' for k in bad)}")
            parts[name] = section_cls(**value)
        return cls(**parts)

    @classmethod
    def load(cls, path: str | Path) -> Config:
        return cls.from_dict(json.loads(Path(path).read_text()))


_SECTION_CLASSES = {
    "model": ModelConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "decode": DecodeConfig,
}


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


# --- overrides -------------------------------------------------------------------------------


def override(config: Config, assignments: dict[str, object]) -> Config:
    """Apply `{"train.max_steps": 2000, ...}`; strings are parsed to the field's type.

    Each section's changes are applied together, so checks across fields see the final values.
    """
    changes: dict[str, dict[str, object]] = {}
    for key, raw in assignments.items():
        section_name, _, name = key.partition(".")
        _require(section_name in _SECTION_CLASSES and bool(name), f"unknown config key: {key}")
        section_cls = _SECTION_CLASSES[section_name]
        hints = typing.get_type_hints(section_cls)
        _require(name in hints, f"unknown config key: {key}")
        changes.setdefault(section_name, {})[name] = _coerce(key, raw, hints[name])
    sections = {
        name: dataclasses.replace(getattr(config, name), **values)
        for name, values in changes.items()
    }
    return dataclasses.replace(config, **sections)


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`["train.max_steps=2000"]` -> `{"train.max_steps": "2000"}`."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        _require(bool(sep) and bool(key), f"expected key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def load_overrides(path: str | Path) -> dict[str, object]:
    """Flatten a YAML (or JSON) file `{train: {max_steps: 2000}}` into dotted assignments."""
    import yaml

    tree = yaml.safe_load(Path(path).read_text()) or {}
    _require(isinstance(tree, dict), f"{path}: expected a mapping of sections")
    flat = {}
    for section, values in tree.items():
        _require(isinstance(values, dict), f"{path}: section {section!r} must be a mapping")
        for name, value in values.items():
            flat[f"{section}.{name}"] = value
    return flat


def _coerce(key: str, raw: object, kind: object) -> object:
    if isinstance(kind, types.UnionType):  # e.g. float | None: take the first concrete type
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
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


def scale_for_peak(peak: float, d_model: int, warmup_steps: int) -> float:
    """The `train.lr_scale` at which eq. 3 peaks at `peak` (at step == warmup_steps)."""
    return peak / (d_model**-0.5 * warmup_steps**-0.5)


# --- presets (Table 3 and small-data models) ---------------------------------------------------


def base() -> Config:
    """Transformer (base), Table 3: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, eps_ls=0.1."""
    return Config(
        model=ModelConfig(n_layers=6, d_model=512, d_ff=2048, h=8, d_k=64, d_v=64, dropout=0.1),
        data=DataConfig(max_tokens=25000),
        train=TrainConfig(warmup_steps=4000, label_smoothing=0.1, max_steps=100000),
    )


def big() -> Config:
    """Transformer (big), Table 3: N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, 300k steps."""
    return Config(
        model=ModelConfig(n_layers=6, d_model=1024, d_ff=4096, h=16, d_k=64, d_v=64, dropout=0.3),
        data=DataConfig(max_tokens=25000),
        train=TrainConfig(warmup_steps=4000, label_smoothing=0.1, max_steps=300000),
    )


def tiny() -> Config:
    """The Transformer-tiny of published Multi30k baselines (Wu et al. 2021), for a CPU.

    4 layers, d_model 128, 4 heads, d_ff 256, dropout 0.3, peak learning rate 0.005 after 2,000
    warmup steps, a 10k joint BPE, and the average of the last 10 checkpoints. Pre-norm, unlike
    the paper: at this learning rate the post-norm stack learned 3x slower on a 2-core CPU
    (Multi30k en-de, dev perplexity 23.8 at update 750 pre-norm, 23.7 at update 2,000 post-norm;
    benchmarks/RESULTS.md). `--set model.pre_norm=false` restores the paper's order.
    """
    d_model, warmup, peak = 128, 2000, 0.005
    return Config(
        model=ModelConfig(
            n_layers=4, d_model=d_model, d_ff=256, h=4, d_k=32, d_v=32, dropout=0.3, pre_norm=True
        ),
        data=DataConfig(max_tokens=4096),
        train=TrainConfig(
            warmup_steps=warmup,
            lr_scale=scale_for_peak(peak, d_model, warmup),
            label_smoothing=0.1,
            max_steps=20000,
            valid_every=125,  # about one epoch of Multi30k, so the last 10 are the last 10 epochs
            keep_last=10,
            average_last=10,
        ),
    )


def small() -> Config:
    """3+3 layers, d_model 256, 4 heads, d_ff 1024, pre-norm: the speed comparison (issue #3).

    Pre-norm, tied embeddings, 4,096-token batches, peak learning rate 1e-3 after 400 warmup
    steps: the setup the peers (OpenNMT-py, JoeyNMT, fairseq) were measured with.
    """
    d_model, warmup, peak = 256, 400, 1e-3
    return Config(
        model=ModelConfig(
            n_layers=3, d_model=d_model, d_ff=1024, h=4, d_k=64, d_v=64, dropout=0.1, pre_norm=True
        ),
        data=DataConfig(max_tokens=4096),
        train=TrainConfig(
            warmup_steps=warmup,
            lr_scale=scale_for_peak(peak, d_model, warmup),
            label_smoothing=0.1,
            max_steps=20000,
            valid_every=500,
        ),
    )


# Table 3, written out row by row: (N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, positions).
_TABLE3 = {
    ("A", 1): (6, 512, 2048, 1, 512, 512, 0.1, 0.1, "sinusoidal"),
    ("A", 2): (6, 512, 2048, 4, 128, 128, 0.1, 0.1, "sinusoidal"),
    ("A", 3): (6, 512, 2048, 16, 32, 32, 0.1, 0.1, "sinusoidal"),
    ("A", 4): (6, 512, 2048, 32, 16, 16, 0.1, 0.1, "sinusoidal"),
    ("B", 1): (6, 512, 2048, 8, 16, 64, 0.1, 0.1, "sinusoidal"),
    ("B", 2): (6, 512, 2048, 8, 32, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 1): (2, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 2): (4, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 3): (8, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 4): (6, 256, 2048, 8, 32, 32, 0.1, 0.1, "sinusoidal"),
    ("C", 5): (6, 1024, 2048, 8, 128, 128, 0.1, 0.1, "sinusoidal"),
    ("C", 6): (6, 512, 1024, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 7): (6, 512, 4096, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("D", 1): (6, 512, 2048, 8, 64, 64, 0.0, 0.1, "sinusoidal"),
    ("D", 2): (6, 512, 2048, 8, 64, 64, 0.2, 0.1, "sinusoidal"),
    ("D", 3): (6, 512, 2048, 8, 64, 64, 0.1, 0.0, "sinusoidal"),
    ("D", 4): (6, 512, 2048, 8, 64, 64, 0.1, 0.2, "sinusoidal"),
    ("E", 1): (6, 512, 2048, 8, 64, 64, 0.1, 0.1, "learned"),
}

# The paper's parameter counts (x 10^6) for the rows that change size; base is 65, big 213.
TABLE3_PARAMS_M = {
    ("B", 1): 58,
    ("B", 2): 60,
    ("C", 1): 36,
    ("C", 2): 50,
    ("C", 3): 80,
    ("C", 4): 28,
    ("C", 5): 168,
    ("C", 6): 53,
    ("C", 7): 90,
}


def table3(row: str, index: int) -> Config:
    """A variant of Table 3, e.g. `table3("B", 1)`: base with the row's columns changed."""
    key = (row.upper(), index)
    _require(key in _TABLE3, f"Table 3 has no row {row}{index}; rows: {sorted(_TABLE3)}")
    n, d_model, d_ff, h, d_k, d_v, p_drop, eps_ls, positions = _TABLE3[key]
    return Config(
        model=ModelConfig(
            n_layers=n,
            d_model=d_model,
            d_ff=d_ff,
            h=h,
            d_k=d_k,
            d_v=d_v,
            dropout=p_drop,
            positions=positions,
        ),
        data=DataConfig(max_tokens=25000),
        train=TrainConfig(warmup_steps=4000, label_smoothing=eps_ls, max_steps=100000),
    )


PRESETS = {"base": base, "big": big, "tiny": tiny, "small": small}


def preset(name: str) -> Config:
    """`base`, `big`, `tiny`, `small`, or a Table 3 row written like `B1` or `table3-B1`."""
    if name in PRESETS:
        return PRESETS[name]()
    row = name.removeprefix("table3-").removeprefix("table3_")
    if len(row) >= 2 and row[0].isalpha() and row[1:].isdigit():
        return table3(row[0], int(row[1:]))
    names = sorted(PRESETS) + [f"{r}{i}" for r, i in sorted(_TABLE3)]
    raise ConfigError(f"unknown preset {name!r}; choose from {', '.join(names)}")
