"""``magnetar smart-city`` and ``python -m magnetar.demo.smart_city``: one click command whose
flags are ``CitySettings``' fields.

The command lives here, not in ``magnetar.cli`` (the demo does not import the CLI package);
``magnetar``'s group adds it. ``run(settings)`` is the same job for Python callers.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

import click

from magnetar.demo.smart_city.settings import CitySettings

DESCRIPTION = (
    "Play a smart city against an embedded broker: vehicles, sensors and cameras publish telemetry and "
    "large frames, a Spark Structured Streaming pipeline detects road damage per area and writes alerts, "
    "and every vehicle in the area receives them. Ends with a summary."
)

_TYPES: dict[str, type] = {"int": int, "float": float, "str": str}


def settings_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One flag per ``CitySettings`` field (``vehicles_per_area`` is ``--vehicles-per-area``), each
    defaulting to ``None`` so that only the flags given override the dataclass's defaults."""
    for field in reversed(dataclasses.fields(CitySettings)):
        flag = "--" + field.name.replace("_", "-")
        help_text = field.metadata["help"]
        if field.type in ("bool", bool):
            option = click.option(flag, is_flag=True, default=None, help=help_text)
        else:
            kind = _TYPES[str(field.type)]
            option = click.option(
                flag, type=kind, default=None, help=f"{help_text} (default {field.default})"
            )
        command = option(command)
    return command


@click.command("smart-city", help=DESCRIPTION, short_help="Run the smart-city demo job.")
@settings_options
@click.option("--log-level", default="WARNING", show_default=True)
@click.pass_context
def smart_city(ctx: click.Context, log_level: str, **values: Any) -> None:
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = CitySettings.from_values(values)
    except ValueError as exc:
        raise click.UsageError(str(exc), ctx=ctx) from None
    ctx.exit(run(settings))  # the job's exit code, under click's standalone mode too (python -m ...)


def run(settings: CitySettings) -> int:
    """Run the job with ``settings``: 0 when it met its checks, 1 when not or when it could not start
    (its broker, its work directory: one line on standard error), 2 when Spark or Java is missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print(
            "magnetar smart-city needs the spark extra: pip install -e '.[spark]' (and Java 17)",
            file=sys.stderr,
        )
        return 2
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("magnetar smart-city needs Java 17 for Spark (java on the PATH, or JAVA_HOME)", file=sys.stderr)
        return 2
    from magnetar.broker_process import BrokerProcessError
    from magnetar.demo.smart_city.run import run_job

    try:
        return 0 if run_job(settings).ok else 1
    except BrokerProcessError as exc:  # its log is in the work directory (--keep-work-dir)
        return _failed(exc, f"the embedded broker did not start: {exc.reason}")
    except OSError as exc:  # the work directory, mostly (--work-dir)
        where = f": {exc.filename}" if exc.filename else ""
        return _failed(exc, f"{exc.strerror or exc}{where}")


def _failed(exc: BaseException, line: str) -> int:
    """One line on standard error, as every ``magnetar`` command fails (the traceback at DEBUG)."""
    logging.getLogger(__name__).debug("the job failed", exc_info=exc)
    print(f"magnetar smart-city: {line}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """``python -m magnetar.demo.smart_city``: the command under its module name (exits)."""
    return smart_city.main(args=argv, prog_name="python -m magnetar.demo.smart_city")
