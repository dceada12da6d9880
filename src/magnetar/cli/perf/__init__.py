"""``magnetar perf``: load generators for any Pulsar-protocol broker, as ``pulsar-perf``.

``produce`` publishes at a rate and measures send-to-receipt latency; ``consume`` receives and
measures end-to-end latency. Both print throughput and latency percentiles every interval and a
summary at the end (report.py), through Magnetar's own asyncio client (binary protocol only).
"""

from __future__ import annotations

import click

from magnetar.cli.perf.consume import consume
from magnetar.cli.perf.produce import produce


@click.group(short_help="Throughput and latency percentiles of a broker (pulsar-perf).")
def perf() -> None:
    """Measure a broker's throughput and latency (pulsar-perf produce / consume)."""


perf.add_command(produce)
perf.add_command(consume)
