"""Start-up: the checks of the settings that need the broker's other modules, and what they make.

``BrokerConfig`` checks each setting's type and range; whether the settings can work together
(TLS files named where a TLS port is set, authentication providers with their keys, entry
metadata interceptors that load) is checked here, once, before anything is started. What the
checks build is kept and handed to the broker (``BrokerSetup``): the authentication providers
with their keys (each key file is read once) and the interceptor classes. The TLS context is
made from the files at ``BrokerService.start``, the first thing it does (``tls.server_context``).

A setting that cannot work raises ``ValueError`` (``TlsConfigError`` for TLS), naming it: a
broker asked to authenticate never starts open by mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.broker import tls
from magnetar.broker.authentication import Authentication
from magnetar.broker.config import BrokerConfig
from magnetar.broker.entry_metadata import EntryMetadataInterceptor, load_interceptor_class

#: Makes one interceptor (a topic partition's own: it may keep state).
InterceptorFactory = Callable[[], EntryMetadataInterceptor]


@dataclass(frozen=True)
class BrokerSetup:
    """The settings and what start-up made of them; only ``prepare`` makes one."""

    config: BrokerConfig
    #: The authentication providers; None while authentication is off.
    authentication: Authentication | None
    #: The broker entry metadata interceptors, in the configured order (PIP 70).
    interceptors: tuple[InterceptorFactory, ...]


def prepare(config: BrokerConfig) -> BrokerSetup:
    """Check that ``config``'s settings can work together and build what they name."""
    tls.check_settings(config)  # raises TlsConfigError, a ValueError
    authentication = Authentication.from_config(config)  # raises ValueError
    config.validate()
    interceptors = tuple(load_interceptor_class(n) for n in config.broker_entry_metadata_interceptors)
    return BrokerSetup(config, authentication, interceptors)


def load(path: Path | None = None, environ: Mapping[str, str] | None = None, **overrides: Any) -> BrokerSetup:
    """``BrokerConfig.load`` (defaults, the file, ``MAGNETAR_*`` variables, ``overrides``), then
    ``prepare``: what ``magnetar standalone`` starts with."""
    return prepare(BrokerConfig.load(path, environ, **overrides))


def load_with_sources(
    path: Path | None = None, environ: Mapping[str, str] | None = None, **overrides: Any
) -> tuple[BrokerSetup, dict[str, str]]:
    """``load``, and where each setting's value came from (``magnetar config show``)."""
    config, sources = BrokerConfig.load_with_sources(path, environ, **overrides)
    return prepare(config), sources
