"""``magnetar tokens``: keys and JWT tokens for token authentication, as Pulsar's ``pulsar tokens``.

    magnetar tokens create-secret-key [--output FILE] [--base64]
    magnetar tokens create-key-pair --output-private-key F --output-public-key F [-a RS256|ES256]
    magnetar tokens create (--secret-key K | --private-key K) --subject ROLE [--expiry-time 1h]
    magnetar tokens show TOKEN | --token-file F
    magnetar tokens validate TOKEN | --token-file F (--secret-key K | --public-key K)

Keys are written as Pulsar writes them (a secret key's raw bytes, DER key pairs) and read in
Pulsar's forms (``file:///path``, ``data:;base64,...``, a plain path).
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from magnetar.cli.failures import os_error_text

_NOTE = """\
Makes what token authentication needs (see docs/configuration.md, authentication_enabled):

\b
  magnetar tokens create-secret-key --output secret.key
  magnetar tokens create --secret-key file:///path/secret.key --subject my-role

and the broker's token_secret_key = "file:///path/secret.key". A client then passes the token
(pulsar.AuthenticationToken(token) with the official client)."""

_PATH = click.Path(dir_okay=False, path_type=Path)


@click.group(
    "tokens", help=_NOTE, short_help="Create keys and tokens for token authentication (as pulsar tokens)."
)
def tokens_group() -> None:
    pass


@contextmanager
def _token_errors() -> Iterator[None]:
    """A bad key, token or duration is one line and exit 1, never a traceback."""
    from magnetar.security import tokens

    try:
        yield
    except (ValueError, tokens.InvalidToken) as exc:
        raise click.ClickException(str(exc)) from None


def one_of(ctx: click.Context, **values: Any) -> None:
    """Exactly one of the options named in ``values`` (as argparse's required mutually exclusive
    group): a usage error (exit 2) naming them otherwise."""
    given = [name for name, value in values.items() if value is not None]
    if len(given) != 1:
        flags = " / ".join(_flag(ctx, name) for name in values)
        said = "both" if given else "neither"
        raise click.UsageError(f"give exactly one of {flags} ({said} given)", ctx=ctx)


def _flag(ctx: click.Context, name: str) -> str:
    param = next(p for p in ctx.command.params if p.name == name)
    return "/".join(param.opts)


@tokens_group.command("create-secret-key")
@click.option(
    "-a",
    "--signature-algorithm",
    default="HS256",
    show_default=True,
    type=click.Choice(("HS256", "HS384", "HS512")),
)
@click.option("-o", "--output", type=_PATH, help="File to write the key to (default: standard output).")
@click.option("-b", "--base64", "as_base64", is_flag=True, help="Write the key in base64.")
def create_secret_key(signature_algorithm: str, output: Path | None, as_base64: bool) -> int:
    """A new secret key (HS256 by default)."""
    from magnetar.security import tokens

    key = tokens.create_secret_key(signature_algorithm)
    data = base64.b64encode(key) if as_base64 else key
    if output is not None:
        _write(output, data)
    elif as_base64:
        click.echo(data.decode())
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0


@tokens_group.command("create-key-pair")
@click.option(
    "-a",
    "--signature-algorithm",
    default="RS256",
    show_default=True,
    type=click.Choice(("RS256", "ES256", "ES384", "ES512")),
)
@click.option("--output-private-key", type=_PATH, required=True, help="File for the private key (DER).")
@click.option("--output-public-key", type=_PATH, required=True, help="File for the public key (DER).")
def create_key_pair(signature_algorithm: str, output_private_key: Path, output_public_key: Path) -> int:
    """A new private/public key pair (RS256 by default)."""
    from magnetar.security import tokens

    private, public = tokens.create_key_pair(signature_algorithm)
    _write(output_private_key, private)
    _write(output_public_key, public)
    return 0


@tokens_group.command("create")
@click.option("-sk", "--secret-key", help="Secret key: file:///path, data:;base64,... or a path.")
@click.option("-pk", "--private-key", help="Private key: file:///path, data:;base64,... or a path.")
@click.option("-s", "--subject", required=True, help="The role the token proves.")
@click.option("-e", "--expiry-time", help="Relative expiry, e.g. 30s, 10m, 1h, 3d, 1y (default: never).")
@click.option("-sa", "--signature-algorithm", help="HS256/384/512 for a secret key (default HS256).")
@click.pass_context
def create(
    ctx: click.Context,
    secret_key: str | None,
    private_key: str | None,
    subject: str,
    expiry_time: str | None,
    signature_algorithm: str | None,
) -> int:
    """A new token for a role.

    Signed with a secret key (-sk) or a private key (-pk): one of the two.
    """
    one_of(ctx, secret_key=secret_key, private_key=private_key)
    from magnetar.security import tokens

    with _token_errors():
        if secret_key is not None:
            key = tokens.load_secret_key(secret_key)
        else:
            assert private_key is not None  # one_of: the other one
            key = tokens.load_private_key(private_key)
        expires_in = tokens.parse_duration(expiry_time) if expiry_time else None
        click.echo(tokens.create_token(key, subject, expires_in, signature_algorithm))
    return 0


def _token_input(command: Callable[..., Any]) -> Callable[..., Any]:
    """The token as an argument, ``--token-file`` or ``$TOKEN`` (show and validate)."""
    command = click.option(
        "-f",
        "--token-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="A file holding the token.",
    )(command)
    return click.argument("token", required=False)(command)


@tokens_group.command("show")
@_token_input
def show(token: str | None, token_file: Path | None) -> int:
    """Print a token's header and claims.

    The token is TOKEN, the file --token-file, or $TOKEN.
    """
    from magnetar.security import tokens

    with _token_errors():
        header, claims = tokens.show_token(_token_of(token, token_file))
    click.echo(tokens.to_json(header))
    click.echo("---")
    click.echo(tokens.to_json(claims))
    return 0


@tokens_group.command("validate")
@_token_input
@click.option("-sk", "--secret-key", help="Secret key: file:///path, data:;base64,... or a path.")
@click.option("-pk", "--public-key", help="Public key: file:///path, data:;base64,... or a path.")
@click.option(
    "--token-public-alg", default="RS256", show_default=True, help="With --public-key: RS256 or ES256..."
)
@click.pass_context
def validate(
    ctx: click.Context,
    token: str | None,
    token_file: Path | None,
    secret_key: str | None,
    public_key: str | None,
    token_public_alg: str,
) -> int:
    """Check a token and print its claims.

    The signature (with -sk or -pk, one of the two) and the expiry are checked. The token is
    TOKEN, the file --token-file, or $TOKEN.
    """
    one_of(ctx, secret_key=secret_key, public_key=public_key)
    from magnetar.security import tokens

    with _token_errors():
        text = _token_of(token, token_file)
        if secret_key is not None:
            key, algorithms = tokens.load_secret_key(secret_key), list(tokens.SECRET_ALGORITHMS)
        else:
            assert public_key is not None  # one_of: the other one
            key = tokens.load_public_key(public_key)
            algorithms = tokens.algorithms_for_public_key(key, token_public_alg)
        verified = tokens.verify_token(text, key, algorithms)
    click.echo(tokens.to_json(verified.claims))
    return 0


def _write(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only, fsynced (a key lost in a crash locks everyone out).
    Missing directories on the way are made, as ``mkdir -p`` (``--output keys/secret.key`` in a new
    checkout); a file that still cannot be written is one line and exit 1."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except FileExistsError as exc:  # mkdir: a file where a directory of the path should be
        raise click.ClickException(f"cannot write {path}: {exc.filename} is not a directory") from None
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {os_error_text(exc)}") from None


def _token_of(token: str | None, token_file: Path | None) -> str:
    if token:
        return token.strip()
    if token_file is not None:
        return token_file.read_text().strip()
    if os.environ.get("TOKEN"):
        return os.environ["TOKEN"].strip()
    raise ValueError("give the token as an argument, with --token-file, or in $TOKEN")
