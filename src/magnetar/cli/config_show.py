"""``magnetar config show``: the settings a broker would start with, and where each came from.

    magnetar config show [--config FILE] [--json]

The same sources as ``magnetar standalone`` (defaults, the TOML file, ``MAGNETAR_*`` environment
variables), the same checks: a wrong value fails here as it would at start-up, naming the setting.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from magnetar.broker import startup  # the broker's modules, for this command only

    try:
        setup, sources = startup.load_with_sources(args.config, os.environ)
    except (ValueError, OSError) as exc:
        print(f"magnetar config: {exc}", file=sys.stderr)
        return 1
    values = {name: getattr(setup.config, name) for name in sources}
    if args.json:
        shown = {name: {"value": _plain(v), "source": sources[name]} for name, v in values.items()}
        print(json.dumps(shown, indent=2))
        return 0
    width = max(len(name) for name in values)
    for name, value in values.items():
        print(f"{name.ljust(width)}  {json.dumps(_plain(value))}  ({sources[name]})")
    return 0


def _plain(value: object) -> object:
    return str(value) if isinstance(value, Path) else value
