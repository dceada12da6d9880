"""What every ``magnetar admin`` command shares: the connection flags, the admin client they open,
how answers are printed (tables for people, ``--json`` for scripts) and how failures end.

Exit codes a shell can branch on (docs/cli.md):

====  =====================================================================
0     done
1     the broker refused the request (its reason is printed)
2     a usage error (a missing argument, a bad flag)
3     not found (HTTP 404: no such tenant, namespace, topic, subscription...)
4     already exists or conflicts (HTTP 409)
5     not authenticated or not allowed (HTTP 401, 403)
6     the broker could not be reached
====  =====================================================================
"""

from __future__ import annotations

import functools
import json
import urllib.error
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from magnetar.cli.connection import token_text
from magnetar.client.admin import (
    AdminClient,
    AdminError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
)

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"

EXIT_REFUSED = 1
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_NOT_ALLOWED = 5
EXIT_UNREACHABLE = 6


class AdminCommandError(click.ClickException):
    """A failed admin call: ``Error: <reason>`` on stderr and the exit code for its kind."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        # click declares exit_code on the class, and reads it from the instance: each error its own.
        self.exit_code = exit_code  # type: ignore[misc]


@dataclass(frozen=True, slots=True)
class AdminTarget:
    """Where the admin API is and how to authenticate, as the group's flags gave it."""

    admin_url: str
    auth_token: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False

    def client(self) -> AdminClient:
        return AdminClient(
            self.admin_url,
            token=token_text(self.auth_token, "--auth-token") if self.auth_token else None,
            tls_trust_certs_file_path=self.tls_trust_certs_file_path,
            tls_allow_insecure_connection=self.tls_allow_insecure_connection,
        )


def pass_admin(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the group's ``AdminClient`` as its first argument, and turn what the call
    raises into one line and its exit code (never a traceback)."""

    @click.pass_context
    @functools.wraps(command)
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        target = ctx.find_object(AdminTarget)
        assert target is not None  # the admin group made it before any of its commands runs
        try:
            return command(target.client(), *args, **kwargs)
        except AdminError as exc:
            raise AdminCommandError(_refusal(exc), _exit_code(exc)) from None
        except urllib.error.URLError as exc:
            raise _unreachable(target, exc.reason) from None
        except (ConnectionError, TimeoutError) as exc:
            raise _unreachable(target, exc) from None
        except ValueError as exc:  # a malformed topic or namespace name, found before any call
            raise click.BadParameter(str(exc)) from None

    return wrapper


def _unreachable(target: AdminTarget, reason: object) -> AdminCommandError:
    return AdminCommandError(f"{target.admin_url}: cannot reach the broker ({reason})", EXIT_UNREACHABLE)


def _refusal(exc: AdminError) -> str:
    return f"{exc.reason} (HTTP {exc.status})"


def _exit_code(exc: AdminError) -> int:
    if isinstance(exc, NotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, ConflictError):
        return EXIT_CONFLICT
    if isinstance(exc, UnauthorizedError | ForbiddenError):
        return EXIT_NOT_ALLOWED
    return EXIT_REFUSED


def json_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``: print the broker's answer as JSON (for scripts) instead of a table."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")(command)


# -- output ------------------------------------------------------------------------------------------
def _console() -> Console:
    # Tables go to stdout; rich drops colour and styles when it is not a terminal.
    return Console(soft_wrap=True, highlight=False)


def print_json(value: Any) -> None:
    """``value`` as indented JSON, keys in the broker's order."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def print_names(names: Iterable[str], as_json: bool) -> None:
    """A list of names: one per line (as pulsar-admin prints them), or a JSON array."""
    names = list(names)
    if as_json:
        print_json(names)
    else:
        for name in names:
            click.echo(name)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], as_json: bool) -> None:
    """Rows under column headers for people; a JSON array of objects (keyed by column) for scripts."""
    rows = [list(row) for row in rows]
    if as_json:
        print_json([dict(zip(columns, row, strict=True)) for row in rows])
        return
    table = Table(*columns, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*(_cell(value) for value in row))
    _console().print(table)


def print_mapping(value: Mapping[str, Any] | None, as_json: bool) -> None:
    """A JSON object: a two-column table of its fields (nested values as compact JSON), or JSON."""
    if as_json:
        print_json(value)
        return
    if value is None:
        return
    print_table(("name", "value"), ((k, v) for k, v in value.items()), as_json=False)


def print_document(value: Any) -> None:
    """A nested answer (stats, internal stats) for people: indented JSON, as pulsar-admin prints it."""
    print_json(value)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def done(message: str) -> None:
    """A one-line confirmation of a change, on stderr so that stdout stays the data."""
    click.echo(message, err=True)


def print_value(value: Any, as_json: bool) -> None:
    """One policy's value: as is (a mapping as a table), or JSON; one not set says so on stderr
    (``null`` with ``--json``), so that stdout holds only values."""
    if as_json:
        print_json(value)
    elif value is None:
        done("not set (the broker's setting applies)")
    elif isinstance(value, Mapping):
        print_mapping(value, as_json=False)
    else:
        click.echo(_cell(value))


def comma_list(value: str | None) -> list[str] | None:
    """``a,b,c`` as pulsar-admin's list flags take it (blanks dropped); None stays None."""
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]
