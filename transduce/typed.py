"""A configuration's fields of the types they declare. Built from Python, a dataclass takes any
value: `TaskConfig(lowercase="false")` would count as true and score the other way, silently.
`config.override` reads strings for the command line; this checks what Python hands over, in
every section's `__post_init__` (`check_types`), so a section built alone is checked too."""

from __future__ import annotations

import dataclasses
import functools
import typing

PLAIN = (bool, int, float, str)


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field."""


@functools.cache
def _plain_fields(cls: type) -> dict[str, type]:
    """The fields of `cls` declared as one plain type (others, unions and sections, left out)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if hints[f.name] in PLAIN}


def check_types(config: object, section: str) -> None:
    """Raise ConfigError naming the first field of `config` not of its declared type. A bool is
    no int here, and an int is a float (0 for a dropout)."""
    for name, kind in _plain_fields(type(config)).items():
        value = getattr(config, name)
        fits = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not fits or (kind is not bool and isinstance(value, bool)):
            given = f"{type(value).__name__} {value!r}"
            raise ConfigError(f"{section}.{name}: expected {kind.__name__}, got {given}")
