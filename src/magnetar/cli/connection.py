"""The connection flags shared by ``produce``, ``consume`` and ``read``, and the client they open.

Flags as ``pulsar-client``'s where it has them (``--url`` is its name for the service URL). A
client error (broker unreachable, authentication refused, topic not allowed) ends the command
with one line and exit code 1, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import click

from magnetar.client import AuthenticationToken, Client, ClientError
from magnetar.security.tokens import KeyConfigError, read_key_bytes

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"


@dataclass(frozen=True, slots=True)
class Connection:
    """Where and how to connect, as the flags gave it."""

    service_url: str
    auth_token: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``magnetar.client.Client`` (the official client's names)."""
        options: dict[str, Any] = {"operation_timeout_seconds": 30, "connection_timeout_ms": 10_000}
        if self.auth_token:
            options["authentication"] = AuthenticationToken(token_text(self.auth_token))
        if self.tls_trust_certs_file_path:
            options["tls_trust_certs_file_path"] = self.tls_trust_certs_file_path
        if self.tls_allow_insecure_connection:
            options["tls_allow_insecure_connection"] = True
        return options


def token_text(value: str, flag: str = "--auth-token") -> str:
    """A token given as itself, or as ``file:///path`` / ``file:path`` (as Pulsar's token params;
    the file URL read as the broker's key settings read theirs)."""
    if not value.startswith("file:"):
        return value.strip()
    try:
        return read_key_bytes(value).decode().strip()
    except (KeyConfigError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read the token file: {exc}", param_hint=flag) from None


def credential_options(scheme: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--auth-token`` and the TLS flags, as the client tools and ``magnetar admin`` take them
    (``scheme``: the URL kind the trusted certificates are for, in the help)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option(
            "--tls-allow-insecure-connection",
            is_flag=True,
            help="Accept a broker certificate that is not trusted (testing only).",
        )(command)
        command = click.option(
            "--tls-trust-certs-file-path",
            metavar="FILE",
            type=click.Path(exists=True, dir_okay=False),
            help=f"CA certificates (PEM) to trust for {scheme}.",
        )(command)
        return click.option("--auth-token", metavar="TOKEN", help="A JWT token, or file:///path to one.")(
            command
        )

    return decorate


def connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the connection flags to a command, which receives them as one ``connection`` argument."""

    @click.option(
        "--service-url",
        "--url",
        "service_url",
        default=DEFAULT_SERVICE_URL,
        show_default=True,
        metavar="URL",
        help="The broker: pulsar://host:port or pulsar+ssl://host:port.",
    )
    @credential_options("pulsar+ssl://")
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        service_url: str,
        auth_token: str | None,
        tls_trust_certs_file_path: str | None,
        tls_allow_insecure_connection: bool,
        **kwargs: Any,
    ) -> Any:
        connection = Connection(
            service_url, auth_token, tls_trust_certs_file_path, tls_allow_insecure_connection
        )
        return command(*args, connection=connection, **kwargs)

    return wrapper


@contextlib.contextmanager
def open_client(connection: Connection) -> Iterator[Client]:
    """A blocking client, closed on the way out; client errors become one-line click errors."""
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    with client_errors(connection.service_url):
        client = Client(connection.service_url, **connection.client_options())
        try:
            yield client
        finally:
            with contextlib.suppress(ClientError):
                client.close()


@contextlib.contextmanager
def client_errors(service_url: str) -> Iterator[None]:
    """Turn what the client raises into ``click.ClickException`` (exit 1, ``Error: ...``)."""
    try:
        yield
    except (ClientError, ValueError, OSError) as exc:  # ValueError, OSError: a bad URL, an unreadable file
        raise click.ClickException(f"{service_url}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
