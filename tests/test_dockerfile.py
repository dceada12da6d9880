"""The container image's definition holds together (no docker here: what can be checked without building).

Its ENTRYPOINT and CMD are parsed by ``magnetar standalone``'s own parser and, with the TOML file the
image ships, loaded as a BrokerConfig; the ports exposed, the volume and the data directory agree; it
runs as a non-root user; and the build context keeps every file a COPY names.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from magnetar.broker.config import BrokerConfig
from magnetar.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuation lines joined."""
    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, rest = line.partition(" ")
            out.append((name.upper(), " ".join(rest.split())))
    return out


def _dockerfile() -> list[tuple[str, str]]:
    return instructions((ROOT / "Dockerfile").read_text())


def _one(name: str) -> str:
    found = [args for instr, args in _dockerfile() if instr == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def _command_line() -> list[str]:
    return json.loads(_one("ENTRYPOINT")) + json.loads(_one("CMD"))


def _standalone_args(argv: list[str]) -> argparse.Namespace:
    """The command line as ``magnetar`` (click) parses it, without running it."""
    command, *rest = argv
    context = cli.commands[command].make_context(command, rest)
    return argparse.Namespace(command=context.info_name, **context.params)


def test_instructions_join_continuations_and_drop_comments():
    text = "# a comment\nFROM x\nRUN a \\\n    && b\n\nUSER u\n"
    assert instructions(text) == [("FROM", "x"), ("RUN", "a && b"), ("USER", "u")]


def test_the_image_runs_magnetar_standalone_on_python_3_11_slim_as_a_non_root_user():
    assert _one("FROM") == "python:3.11-slim"
    assert _command_line()[:2] == ["magnetar", "standalone"]
    assert _one("USER") not in {"root", "0", "0:0"}


def test_the_command_line_listens_everywhere_on_the_exposed_ports_with_data_on_the_volume():
    args = _standalone_args(_command_line()[1:])
    assert args.command == "standalone"
    assert args.host == "0.0.0.0"
    assert _one("EXPOSE").split() == [str(args.port), str(args.http_port)] == ["6650", "8080"]
    assert _one("VOLUME") == str(args.data_dir) == "/data"


def test_the_shipped_config_and_the_flags_make_a_valid_broker_config():
    args = _standalone_args(_command_line()[1:])
    copies = dict(
        reversed(a.split()) for instr, a in _dockerfile() if instr == "COPY" and len(a.split()) == 2
    )
    shipped = ROOT / copies[str(args.config)]
    config = BrokerConfig.load(
        shipped, host=args.host, port=args.port, http_port=args.http_port, data_dir=args.data_dir
    )
    assert (config.host, config.port, config.http_port) == ("0.0.0.0", 6650, 8080)
    # LOOKUP answers must not send clients to 0.0.0.0, the address the broker binds.
    assert config.advertised_address == "pulsar://localhost:6650"


def test_the_build_context_keeps_what_the_copies_name():
    kept = {
        line.strip().removeprefix("!").rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
    }
    for instr, args in _dockerfile():
        if instr == "COPY":
            for source in args.split()[:-1]:
                assert source.split("/")[0] in kept, f"{source} is left out of the build context"
                assert (ROOT / source).exists(), source
