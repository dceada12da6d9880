"""Where each broker setting comes from, and the check that its value has the setting's type.

Settings come, each later source winning, from the defaults, a TOML file, environment variables
``MAGNETAR_<NAME>`` (as Pulsar's images take ``PULSAR_PREFIX_<name>``), and the command line. A
value of the wrong type is refused with the setting's name and where it came from, instead of
being taken for what it looks like: TOML's ``deduplication_enabled = "false"`` is a string, and a
non-empty string would be true; ``port = "6650"`` would stay a string.

Environment variables are text, so they are read as the setting's type: ``true``/``false`` (also
``1``/``0``, ``yes``/``no``, ``on``/``off``) for a flag, a number for a number, a TOML value (a
list ``["a", "b"]``, a table ``{...}``) for lists and tables, the text itself for text and paths.
"""

from __future__ import annotations

import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_PREFIX = "MAGNETAR_"
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class ConfigError(ValueError):
    """A setting that cannot be taken: unknown, of the wrong type, or out of range."""


def env_settings(environ: Mapping[str, str], hints: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """The settings given as ``MAGNETAR_<NAME>`` variables: name -> (value, source). A variable
    with the prefix that names no setting is an error (a typo must not pass unseen)."""
    found: dict[str, tuple[Any, str]] = {}
    for variable, text in environ.items():
        if not variable.startswith(ENV_PREFIX):
            continue
        name = variable[len(ENV_PREFIX) :].lower()
        source = f"environment variable {variable}"
        if name not in hints:
            raise ConfigError(f"unknown setting {name!r} ({source})")
        found[name] = (from_text(name, hints[name], text, source), source)
    return found


def from_text(name: str, hint: Any, text: str, source: str) -> Any:
    """A setting's value from text (an environment variable), as its type reads it."""
    kinds = _kinds(hint)
    if type(None) in kinds and text.strip().lower() in ("", "none", "null"):
        return None
    if bool in kinds:
        word = text.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ConfigError(f"setting {name} = {text!r} ({source}) must be true or false")
    if int in kinds or float in kinds:
        try:
            return int(text) if int in kinds else float(text)
        except ValueError:
            if float in kinds:
                try:
                    return float(text)
                except ValueError:
                    pass
            raise ConfigError(f"setting {name} = {text!r} ({source}) must be a number") from None
    if list in kinds or dict in kinds:
        try:
            return tomllib.loads(f"value = {text}")["value"]
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"setting {name} = {text!r} ({source}) is not a TOML value: {exc}") from None
    return text


def check(name: str, hint: Any, value: Any, source: str) -> Any:
    """``value`` if it has the setting's type (an int where a float is wanted, text where a path
    is, are taken as such); else a ConfigError naming the setting and the source."""
    kinds = _kinds(hint)
    if value is None:
        if type(None) in kinds:
            return None
        raise ConfigError(f"setting {name} ({source}) must not be empty")
    if bool in kinds and isinstance(value, bool):
        return value
    if int in kinds and isinstance(value, int) and not isinstance(value, bool):
        return value
    if float in kinds and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if Path in kinds and isinstance(value, str | Path):
        return Path(value)
    if str in kinds and isinstance(value, str):
        return value
    if list in kinds and isinstance(value, list):
        item = _item_kind(hint)
        if item is not None and not all(isinstance(v, item) for v in value):
            raise ConfigError(f"setting {name} = {value!r} ({source}) must be a list of {item.__name__}")
        return value
    if dict in kinds and isinstance(value, dict):
        return value
    wanted = " or ".join(_name(k) for k in kinds)
    raise ConfigError(f"setting {name} = {value!r} ({source}) must be {wanted}, not {_name(type(value))}")


def _kinds(hint: Any) -> tuple[type, ...]:
    """The plain types a setting's annotation allows (``int | None`` -> (int, NoneType))."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(k for arg in typing.get_args(hint) for k in _kinds(arg))
    if origin is not None:
        return (origin,)
    return (hint,)


def _item_kind(hint: Any) -> type | None:
    for arg in typing.get_args(hint) or ():
        if typing.get_origin(arg) is list or arg is list:
            return _item_kind(arg)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint) or (None,)
        return item if isinstance(item, type) else None
    return None


def _name(kind: type) -> str:
    return {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "text",
        Path: "a path",
        list: "a list",
        dict: "a table",
        type(None): "empty",
    }.get(kind, kind.__name__)
