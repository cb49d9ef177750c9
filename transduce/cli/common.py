"""What several verbs share: the corpora folder's default, --set overrides onto a preset, and the
decoding verbs' model, search, input and output arguments."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..presets import PRESETS
from ..typed import ConfigError


def env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def add_config_arguments(p: argparse.ArgumentParser, default_preset: str | None) -> None:
    """--preset, --config FILE.yaml and --set KEY=VALUE, applied in that order."""
    p.add_argument(
        "--preset",
        default=default_preset,
        required=default_preset is None,
        help=f"{', '.join(PRESETS)}, or a Table 3 row such as B1"
        + (f" (default {default_preset})" if default_preset else ""),
    )
    p.add_argument("--config", type=Path, help="YAML of overrides: {train: {max_steps: 2000}}")
    add_set_argument(p, "overrides such as train.warmup_steps=2000 model.pre_norm=true")


def add_models_argument(p: argparse.ArgumentParser) -> None:
    """`--model`, given once or more: several decode as an ensemble (models/ensemble.py)."""
    p.add_argument(
        "--model",
        type=Path,
        action="append",
        required=True,
        help="a run folder, or one checkpoint file; given several times, the models decode as "
        "an ensemble (the mean of their next-token probabilities; one vocabulary, one task; "
        "the first model's decoding settings)",
    )


def add_set_argument(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """--set KEY=VALUE ...; given more than once, every one counts (argparse's plain nargs
    would keep only the last --set, silently dropping the earlier ones)."""
    p.add_argument("--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE", help=help)


def config_from(args: argparse.Namespace, flags: dict[str, object] | None = None, start=None):
    """The preset (the paper's base if none is named) or `start`, a Config, then the YAML file,
    then --set, then the flags that are not None."""
    from ..config import override, parse_assignments
    from ..presets import preset

    config = start if start is not None else preset(args.preset or "base")
    if getattr(args, "config", None):
        config = override(config, load_overrides(args.config))
    config = override(config, parse_assignments(args.set))
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    return override(config, given)


def load_overrides(path: str | Path) -> dict[str, object]:
    """Flatten a YAML (or JSON) file `{train: {max_steps: 2000}}` into dotted assignments."""
    import yaml

    try:
        tree = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or " ".join(str(error).split())
        raise ConfigError(f"{path}{where}: not valid YAML ({problem})") from error
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: expected a mapping of sections")
    flat = {}
    for section, values in tree.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: section {section!r} must be a mapping")
        for name, value in values.items():
            flat[f"{section}.{name}"] = value
    return flat


def add_model_and_search_arguments(p) -> None:
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


def check_writable(*paths: Path | None) -> None:
    """Output paths checked before the model decodes a whole file for nothing."""
    for path in paths:
        if path is None:
            continue
        if path.is_dir():
            raise ValueError(f"{path} is a folder; name the file to write")
        if not path.parent.is_dir():
            raise ValueError(f"{path}: its folder {path.parent} does not exist")


def input_lines(path: Path | None) -> list[str]:
    from ..data.corpus import decode_lines, read_lines

    return read_lines(path) if path else decode_lines(sys.stdin.buffer.read(), "<stdin>")


def write_output(path: Path | None, text: str) -> None:
    if path:
        path.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
