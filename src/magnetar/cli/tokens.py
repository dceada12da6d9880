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

import argparse
import base64
import os
import sys
from pathlib import Path

_NOTE = """\
Makes what token authentication needs (see docs/configuration.md, authentication_enabled):
  magnetar tokens create-secret-key --output secret.key
  magnetar tokens create --secret-key file:///path/secret.key --subject my-role
and the broker's token_secret_key = "file:///path/secret.key". A client then passes the token
(pulsar.AuthenticationToken(token) with the official client)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tokens",
        help="create keys and tokens for token authentication (as pulsar tokens)",
        description=_NOTE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(log_level="WARNING")
    cmds = p.add_subparsers(dest="tokens_command", required=True)

    c = cmds.add_parser("create-secret-key", help="a new secret key (HS256 by default)")
    c.add_argument("-a", "--signature-algorithm", default="HS256", choices=("HS256", "HS384", "HS512"))
    c.add_argument("-o", "--output", type=Path, help="file to write the key to (default: standard output)")
    c.add_argument("-b", "--base64", action="store_true", help="write the key in base64")

    c = cmds.add_parser("create-key-pair", help="a new private/public key pair (RS256 by default)")
    c.add_argument(
        "-a", "--signature-algorithm", default="RS256", choices=("RS256", "ES256", "ES384", "ES512")
    )
    c.add_argument("--output-private-key", type=Path, required=True, help="file for the private key (DER)")
    c.add_argument("--output-public-key", type=Path, required=True, help="file for the public key (DER)")

    c = cmds.add_parser("create", help="a new token for a role")
    keys = c.add_mutually_exclusive_group(required=True)
    keys.add_argument("-sk", "--secret-key", help="secret key: file:///path, data:;base64,... or a path")
    keys.add_argument("-pk", "--private-key", help="private key: file:///path, data:;base64,... or a path")
    c.add_argument("-s", "--subject", required=True, help="the role the token proves")
    c.add_argument("-e", "--expiry-time", help="relative expiry, e.g. 30s, 10m, 1h, 3d, 1y (default: never)")
    c.add_argument("-sa", "--signature-algorithm", help="HS256/384/512 for a secret key (default HS256)")

    for name, help_text in (("show", "print a token's header and claims"), ("validate", "check a token")):
        c = cmds.add_parser(name, help=help_text)
        c.add_argument("token", nargs="?", help="the token (or --token-file, or $TOKEN)")
        c.add_argument("-f", "--token-file", type=Path)
        if name == "validate":
            vk = c.add_mutually_exclusive_group(required=True)
            vk.add_argument("-sk", "--secret-key")
            vk.add_argument("-pk", "--public-key")
            c.add_argument("--token-public-alg", default="RS256", help="with --public-key: RS256 or ES256...")


def run(args: argparse.Namespace) -> int:
    from magnetar.security import tokens

    try:
        return _COMMANDS[args.tokens_command](args, tokens)
    except (ValueError, tokens.InvalidToken) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _write(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only, fsynced (a key lost in a crash locks everyone out)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _create_secret_key(args: argparse.Namespace, tokens) -> int:
    key = tokens.create_secret_key(args.signature_algorithm)
    data = base64.b64encode(key) if args.base64 else key
    if args.output is not None:
        _write(args.output, data)
    elif args.base64:
        print(data.decode())
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0


def _create_key_pair(args: argparse.Namespace, tokens) -> int:
    private, public = tokens.create_key_pair(args.signature_algorithm)
    _write(args.output_private_key, private)
    _write(args.output_public_key, public)
    return 0


def _create(args: argparse.Namespace, tokens) -> int:
    if args.secret_key is not None:
        key = tokens.load_secret_key(args.secret_key)
    else:
        key = tokens.load_private_key(args.private_key)
    expires_in = tokens.parse_duration(args.expiry_time) if args.expiry_time else None
    print(tokens.create_token(key, args.subject, expires_in, args.signature_algorithm))
    return 0


def _token_of(args: argparse.Namespace) -> str:
    if args.token:
        return args.token.strip()
    if args.token_file is not None:
        return args.token_file.read_text().strip()
    if os.environ.get("TOKEN"):
        return os.environ["TOKEN"].strip()
    raise ValueError("give the token as an argument, with --token-file, or in $TOKEN")


def _show(args: argparse.Namespace, tokens) -> int:
    header, claims = tokens.show_token(_token_of(args))
    print(tokens.to_json(header))
    print("---")
    print(tokens.to_json(claims))
    return 0


def _validate(args: argparse.Namespace, tokens) -> int:
    token = _token_of(args)
    if args.secret_key is not None:
        key, algorithms = tokens.load_secret_key(args.secret_key), list(tokens.SECRET_ALGORITHMS)
    else:
        key = tokens.load_public_key(args.public_key)
        algorithms = tokens.algorithms_for_public_key(key, args.token_public_alg)
    verified = tokens.verify_token(token, key, algorithms)
    print(tokens.to_json(verified.claims))
    return 0


_COMMANDS = {
    "create-secret-key": _create_secret_key,
    "create-key-pair": _create_key_pair,
    "create": _create,
    "show": _show,
    "validate": _validate,
}
