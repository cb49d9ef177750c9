"""Table 3 (s6.2) as changes to any base: each row of (A)-(E) and big, scaled to a chosen preset.

The paper's rows are written out in presets.py against its base model (`table3("B", 1)`). Here
each row is the *change* it makes, so that the same experiment can be run from a smaller base:

- sizes scale by the paper's ratio to its base: B1's d_k 16 is a quarter of 64, so from `tiny`
  (d_k 32) it is 8; C1's N 2 is a third of 6, rounded to a whole layer (from N 4: 1);
- (A) keeps the attention's width h * d_k = h * d_v fixed while h scales (x1/2, x2, x4); A1 is
  the single head, whatever the base's h, with d_k = d_v = that width;
- probabilities move by the paper's difference: D2's P_drop 0.2 is the base's + 0.1, big's 0.3
  the base's + 0.2; a value the paper sets to 0.0 is off;
- E1 switches to learned positions; big also trains 3x as long (300K steps against 100K).

A row that cannot be scaled to a base (a d_k below 1, a width h does not divide, P_drop >= 1,
a value the base already has, as D1's P_drop 0.0 at a base without dropout) raises `CannotScale`
saying why.
From `base()` every row equals the preset the paper prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import SimpleNamespace

from ..config import Config, ConfigError, override
from ..presets import TABLE3_PARAMS_M

Change = Callable[[Config], dict[str, object]]  # a base -> the assignments of the row


class CannotScale(ConfigError):
    """A row of Table 3 has no counterpart at this base; the message says why."""


def _value(config: Config, key: str) -> object:
    section, _, name = key.partition(".")
    try:
        return getattr(getattr(config, section), name)
    except AttributeError as error:
        raise CannotScale(f"the base has no {key}") from error


def times(key: str, factor: Fraction, rounded: bool = False) -> Change:
    """The base's value times `factor`; a size must stay a whole number >= 1."""

    def change(base: Config) -> dict[str, object]:
        old = _value(base, key)
        if isinstance(old, float):
            return {key: old * float(factor)}
        new = factor * old
        if rounded:
            new = max(1, round(new))
        if new.denominator != 1 or new < 1:
            raise CannotScale(f"{key} = {old} x {factor} = {float(new):g} is no size")
        return {key: int(new)}

    return change


def plus(key: str, delta: float) -> Change:
    """The base's probability moved by `delta` (rounded to 6 places: 0.1 + 0.2 is 0.3)."""

    def change(base: Config) -> dict[str, object]:
        new = round(_value(base, key) + delta, 6)
        if not 0.0 <= new < 1.0:
            raise CannotScale(f"{key} = {_value(base, key)} + {delta} = {new} is no probability")
        return {key: new}

    return change


def fixed(key: str, value: object) -> Change:
    """A value the paper names outright: P_drop 0.0, learned positions."""

    def change(base: Config) -> dict[str, object]:
        if _value(base, key) == value:
            raise CannotScale(f"the base already has {key} = {value}: the row would be the base")
        return {key: value}

    return change


def heads(factor: Fraction | None) -> Change:
    """(A): h times `factor` (None: one head), with d_k = d_v = the base's h * d_k."""

    def change(base: Config) -> dict[str, object]:
        h, d_k, d_v = (_value(base, f"model.{k}") for k in ("h", "d_k", "d_v"))
        if d_k != d_v:
            raise CannotScale(f"(A) keeps h * d_k = h * d_v; the base's d_k {d_k} != d_v {d_v}")
        new_h = Fraction(1) if factor is None else factor * h
        width = h * d_k
        if new_h.denominator != 1 or width % new_h:
            raise CannotScale(f"h = {h} x {factor} = {float(new_h):g} heads cannot share {width}")
        new_h = int(new_h)
        return {"model.h": new_h, "model.d_k": width // new_h, "model.d_v": width // new_h}

    return change


def _sizes(*pairs: tuple[str, Fraction]) -> tuple[Change, ...]:
    return tuple(times(f"model.{key}", factor) for key, factor in pairs)


F = Fraction
LONGER = (times("train.max_steps", F(3)), times("train.max_minutes", F(3)))  # big: 300K vs 100K


@dataclass(frozen=True)
class Row:
    """One line of Table 3: its change, and the paper's dev numbers (newstest2013)."""

    name: str
    group: str  # "A".."E"; "" for base and big
    changes: tuple[Change, ...]
    ppl: float  # the paper's dev perplexity per wordpiece
    bleu: float  # the paper's dev BLEU
    params_m: int | None  # the paper's parameter count, in millions, where it gives one


def _row(name: str, ppl: float, bleu: float, *changes: Change) -> Row:
    group = name[0] if name[1:].isdigit() else ""
    key = (group, int(name[1:])) if group else None
    params = {"base": 65, "big": 213}.get(name, TABLE3_PARAMS_M.get(key))
    return Row(name, group, changes, ppl, bleu, params)


ROWS = (
    _row("base", 4.92, 25.8),
    _row("A1", 5.29, 24.9, heads(None)),
    _row("A2", 5.00, 25.5, heads(F(1, 2))),
    _row("A3", 4.91, 25.8, heads(F(2))),
    _row("A4", 5.01, 25.4, heads(F(4))),
    _row("B1", 5.16, 25.1, times("model.d_k", F(16, 64))),
    _row("B2", 5.01, 25.4, times("model.d_k", F(32, 64))),
    _row("C1", 6.11, 23.7, times("model.n_layers", F(2, 6), rounded=True)),
    _row("C2", 5.19, 25.3, times("model.n_layers", F(4, 6), rounded=True)),
    _row("C3", 4.88, 25.5, times("model.n_layers", F(8, 6), rounded=True)),
    _row("C4", 5.75, 24.5, *_sizes(("d_model", F(1, 2)), ("d_k", F(1, 2)), ("d_v", F(1, 2)))),
    _row("C5", 4.66, 26.0, *_sizes(("d_model", F(2)), ("d_k", F(2)), ("d_v", F(2)))),
    _row("C6", 5.12, 25.4, times("model.d_ff", F(1, 2))),
    _row("C7", 4.75, 26.2, times("model.d_ff", F(2))),
    _row("D1", 5.77, 24.6, fixed("model.dropout", 0.0)),
    _row("D2", 4.95, 25.5, plus("model.dropout", 0.1)),
    _row("D3", 4.67, 25.3, fixed("train.label_smoothing", 0.0)),
    _row("D4", 5.47, 25.7, plus("train.label_smoothing", 0.1)),
    _row("E1", 4.92, 25.7, fixed("model.positions", "learned")),
    _row(
        "big", 4.33, 26.4,
        *_sizes(("d_model", F(2)), ("d_ff", F(2)), ("h", F(2))),
        plus("model.dropout", 0.2), *LONGER,
    ),
)  # fmt: skip
ROW_NAMES = tuple(row.name for row in ROWS)
_BY_NAME = {row.name: row for row in ROWS}


def row(name: str) -> Row:
    if name not in _BY_NAME:
        raise ConfigError(f"Table 3 has no row {name!r}; rows: {', '.join(ROW_NAMES)}")
    return _BY_NAME[name]


def row_config(base: Config, name: str) -> Config:
    """The base with row `name`'s change; raises CannotScale when the row has no counterpart."""
    assignments: dict[str, object] = {}
    for change in row(name).changes:
        assignments.update(change(base))
    try:
        return override(base, assignments)
    except CannotScale:
        raise
    except ConfigError as error:
        raise CannotScale(str(error)) from error


def parameters(config: Config, vocab_size: int) -> int:
    """The model's parameter count at a vocabulary of `vocab_size`, without building weights."""
    import torch

    from ..models import build_model, count_parameters

    with torch.device("meta"):  # shapes only: even `big` costs no memory
        return count_parameters(build_model(config.model, SimpleNamespace(size=vocab_size, pad=0)))


def params_table(base: Config, vocab_size: int, rows: Sequence[str] | None = None) -> str:
    """Markdown, one line per row of Table 3 that states a count (of `rows`, default all):
    ours and the paper's (M)."""
    chosen = set(ROW_NAMES if rows is None else (row(name).name for name in rows))
    lines = [
        "| row | N | d_model | d_ff | h | d_k | d_v | parameters (M) | paper (M) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for line in (r for r in ROWS if r.params_m is not None and r.name in chosen):
        try:
            config = row_config(base, line.name)
        except CannotScale as error:
            lines.append(f"| {line.name} | cannot scale: {error} | | | | | | | {line.params_m} |")
            continue
        m, count = config.model, parameters(config, vocab_size) / 1e6
        sizes = " | ".join(str(v) for v in (m.n_layers, m.d_model, m.d_ff, m.h, m.d_k, m.d_v))
        lines.append(f"| {line.name} | {sizes} | {count:.1f} | {line.params_m} |")
    return "\n".join(lines) + "\n"
