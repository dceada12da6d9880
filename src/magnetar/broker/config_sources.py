"""Where each broker setting comes from, and how the model's refusal of one is worded.

Settings come, each later source winning, from the defaults, a TOML file, environment variables
``MAGNETAR_<NAME>`` (as Pulsar's images take ``PULSAR_PREFIX_<name>``), and the command line. The
model (``BrokerConfig``, strict) refuses a value of the wrong type instead of taking it for what it
looks like (TOML's ``deduplication_enabled = "false"`` is a string, and a non-empty string would be
true); ``refusal`` names the setting, the value and where it came from.

Environment variables are text, so they are read as the setting's type: ``true``/``false`` (also
``1``/``0``, ``yes``/``no``, ``on``/``off``) for a flag, a number for a number, a TOML value (a
list ``["a", "b"]``, a table ``{...}``) for lists and tables, the text itself for text and paths.
"""

from __future__ import annotations

import tomllib
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

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
            if typing.Literal in kinds:  # a number or a word (workers = "auto"): the model checks it
                return text.strip()
            raise ConfigError(f"setting {name} = {text!r} ({source}) must be a number") from None
    if list in kinds or dict in kinds:
        try:
            return tomllib.loads(f"value = {text}")["value"]
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"setting {name} = {text!r} ({source}) is not a TOML value: {exc}") from None
    return text


def refusal(exc: ValidationError, values: Mapping[str, Any], sources: Mapping[str, str]) -> ConfigError:
    """The model's first complaint as one line naming the setting, its value and its source:
    ``setting port = '6650' (file m.toml) must be a valid integer``."""
    error = exc.errors()[0]
    name, *inside = (str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Input should be ").removeprefix("Value should be ")
    if inside:
        message += f" at item {'.'.join(inside)}"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    shown = repr(values.get(name, error["input"]))
    return ConfigError(f"setting {name} = {shown} ({sources.get(name, 'default')}) must be {message}{more}")


def _kinds(hint: Any) -> tuple[type, ...]:
    """The plain types a setting's annotation allows (``int | None`` -> (int, NoneType))."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(k for arg in typing.get_args(hint) for k in _kinds(arg))
    if origin is not None:
        return (origin,)
    return (hint,)
