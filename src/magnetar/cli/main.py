"""The ``magnetar`` command: a click group of the broker's commands and the client tools.

Every command is a click command (``smart-city``'s lives with the demo, which does not import
this package). ``produce``, ``consume`` and ``read`` talk to any Pulsar-protocol broker through
Magnetar's own client; ``completion`` prints the shell script for click's completion.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import importlib
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from magnetar import __version__
from magnetar.cli import config_show, repair
from magnetar.cli.failures import os_error_text

#: The commands imported when named (``module:attribute``): the client tools import the whole client
#: (and jwt, cryptography, rich ...), which ``magnetar standalone`` does not need before it listens.
LAZY_COMMANDS = {
    "tokens": "magnetar.cli.tokens:tokens_group",
    "smart-city": "magnetar.demo.smart_city.cli:smart_city",
    "produce": "magnetar.cli.produce:produce",
    "consume": "magnetar.cli.consume:consume",
    "read": "magnetar.cli.consume:read",
    "admin": "magnetar.cli.admin:admin",
    "perf": "magnetar.cli.perf:perf",
    "completion": "magnetar.cli.completion:completion",
}


class LazyGroup(click.Group):
    """A click group whose ``LAZY_COMMANDS`` are imported on first use (help, completion, a run)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), target
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="magnetar", message="%(prog)s %(version)s")
def cli() -> None:
    """Magnetar, a small Pulsar-compatible broker, and tools for any Pulsar broker."""


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _event_loop_runner() -> Callable[..., Any]:
    try:
        import uvloop

        return uvloop.run
    except ImportError:
        return asyncio.run


_PATH = click.Path(path_type=Path)


@cli.command()
@click.option("--host", help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, help="Binary protocol port (default 6650; 0 picks a free one).")
@click.option("--http-port", type=int, help="HTTP admin port (default 8080; 0 picks a free one).")
@click.option(
    "--mqtt-port", type=int, help="Serve MQTT 3.1.1 and 5.0 on this port (default off; 0 picks a free one)."
)
@click.option(
    "--mqtts-port",
    type=int,
    help="Serve MQTT over TLS on this port with the broker's TLS settings (default off; 0 picks a free one).",
)
@click.option(
    "--broker-service-port-enabled/--no-broker-service-port-enabled",
    default=None,
    help="Serve the plain binary protocol on --port (default on; off: pulsar+ssl:// only).",
)
@click.option(
    "--web-service-port-enabled/--no-web-service-port-enabled",
    default=None,
    help="Serve plain HTTP on --http-port (default on; off: HTTPS only).",
)
@click.option("--data-dir", type=_PATH, help="Where ledgers and metadata live (default ./data).")
@click.option("--config", type=_PATH, help="TOML file with settings (see docs/configuration.md).")
@click.option(
    "--workers",
    callback=lambda ctx, param, value: _workers(value),
    help="Broker processes: a number, or auto for one per usable core (default 1).",
)
@click.option("--worker", hidden=True, help="Serve as a supervisor's worker (JSON; cli/supervisor.py).")
@click.option("--log-level", default="INFO", show_default=True)
def standalone(**options: Any) -> int:
    """Run a broker in the foreground."""
    _configure_logging(options["log_level"])
    faulthandler.enable()  # a crash in native code (a signal) leaves its Python traceback on stderr
    # The broker's modules, for this command only.
    from magnetar.cli import standalone as process
    from magnetar.cli import worker

    role, args = options.pop("worker"), argparse.Namespace(**options)
    if role is not None:
        return _event_loop_runner()(worker.run(args, json.loads(role)))
    return _event_loop_runner()(process.run(args))


def _workers(value: str | None) -> int | str | None:
    """``--workers``: a count, or ``auto``; the settings model checks the range."""
    if value is None or value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number nor auto") from None


@cli.command(help=repair.NOTE, short_help="Rebuild lost metadata from the ledger files (broker stopped).")
@click.option("--data-dir", type=_PATH, help="The broker's data directory (default ./data).")
@click.option("--config", type=_PATH, help="The broker's TOML file, to take data_dir from.")
@click.option("--log-level", default="INFO", show_default=True)
def repair_command(**options: Any) -> int:
    _configure_logging(options["log_level"])
    return repair.run(argparse.Namespace(**options))


repair_command.name = "repair"


@cli.group()
def config() -> None:
    """Show the broker's effective settings and where each came from."""


@config.command()
@click.option("--config", type=_PATH, help="TOML file with settings, as magnetar standalone takes.")
@click.option("--json", "json_output", is_flag=True, help="One JSON object: {name: {value, source}}.")
def show(config: Path | None, json_output: bool) -> int:
    """The effective settings (defaults, --config file, MAGNETAR_* variables)."""
    _configure_logging("WARNING")
    return config_show.run(argparse.Namespace(config=config, json=json_output))


def exit_code(exc: SystemExit) -> int:
    """``sys.exit``'s meaning: None is 0, a number is itself, anything else (a message) is said
    on standard error and is 1; it was 1 with nothing said, a silent failure."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    click.echo(f"Error: {exc.code}", err=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run ``magnetar``; the exit code (usage errors 2, as before)."""
    try:
        result = cli.main(args=argv, prog_name="magnetar", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except SystemExit as exc:  # click's shell completion answers and exits
        return exit_code(exc)
    except OSError as exc:  # a file, directory or port the user named: one line, as click's errors
        click.echo(f"Error: {os_error_text(exc)}", err=True)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
