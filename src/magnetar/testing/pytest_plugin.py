"""The ``magnetar_broker`` pytest fixture, loaded through the ``pytest11`` entry point of the package.

Loading it costs an import of the standard library: a broker is started only when a test asks for
``magnetar_broker``, once per session by default (the ini option ``magnetar_broker_scope`` picks
another scope). A suite changes the broker's settings by overriding ``magnetar_broker_settings``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pytest

from magnetar.testing.embedded import EmbeddedBroker, embedded_broker

SCOPE_INI = "magnetar_broker_scope"
Scope = Literal["session", "package", "module", "class", "function"]
SCOPES: tuple[Scope, ...] = ("session", "package", "module", "class", "function")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        SCOPE_INI,
        "scope of the magnetar_broker fixture: session (default), package, module, class or function",
        default="session",
    )


def broker_scope(fixture_name: str, config: pytest.Config) -> Scope:
    """The scope of the broker fixtures, from the ini option; a wrong one is an error naming it."""
    scope = str(config.getini(SCOPE_INI)).strip() or "session"
    for known in SCOPES:
        if scope == known:
            return known
    raise pytest.UsageError(f"{SCOPE_INI} = {scope!r}: expected one of {', '.join(SCOPES)}")


@pytest.fixture(scope=broker_scope)
def magnetar_broker_settings() -> dict[str, Any]:
    """Broker settings for ``magnetar_broker`` (as in the TOML file, ``{"workers": 2}`` included);
    override it in a conftest.py."""
    return {}


@pytest.fixture(scope=broker_scope)
def magnetar_broker(magnetar_broker_settings: dict[str, Any]) -> Iterator[EmbeddedBroker]:
    """A running Magnetar broker: ``.service_url`` (pulsar://127.0.0.1:PORT) and ``.admin_url``."""
    with embedded_broker(**magnetar_broker_settings) as broker:
        yield broker
