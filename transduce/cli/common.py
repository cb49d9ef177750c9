"""What several verbs share: the corpora folder's default, and --set overrides onto a preset."""

from __future__ import annotations

import argparse
import os
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
