"""The scenarios, the two modes, and one measured run of a scenario on a fresh broker.

A run starts its own broker on an empty data dir, so CPU seconds and peak RSS belong to that run alone.
The producer sends for ``duration_s`` (or up to a count), then the run waits until every receipted message
was consumed. Modes:

- ``concurrent``: the consumer receives while the producer sends;
- ``backlog``: the subscription is created, the producer sends everything, then a consumer drains the backlog.
"""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pulsar

from bench.brokers import MAGNETAR, BrokerSpec, MagnetarSource, make_process
from bench.hotspots import start_profiler, stop_profiler
from bench.procs import BrokerStartError, UsageSampler
from bench.stats import latency_summary
from bench.workload import Consuming, Payloads, Produced, Producing, Tally, make_client

MODES = ("concurrent", "backlog")
WINDOW_BYTES = 48 * 1024 * 1024  # under the C++ client's 64 MiB memory limit
MB = 1_000_000


@dataclass(frozen=True)
class Scenario:
    name: str
    size: int  # payload bytes
    max_messages: int  # a cap on top of the duration
    batching: bool = False
    sync: bool = False
    chunking: bool = False
    receiver_queue: int = 1000
    max_pending: int = 1000
    receipt_group: int = 1  # async sends per receipt callback (see ``Producing``)

    @property
    def label(self) -> str:
        how = "async"
        if self.batching or self.sync or self.chunking:
            how = "batched" if self.batching else "sync send" if self.sync else "chunked"
        return f"{_size_label(self.size)}, {how}"

    @property
    def window(self) -> int:
        """Messages in flight without a receipt: ``max_pending``, and at most ``WINDOW_BYTES`` of them."""
        return max(1, min(self.max_pending, WINDOW_BYTES // self.size))


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("100B-batched", 100, 3_000_000, batching=True, max_pending=10_000, receipt_group=100),
        Scenario("1KB-sync", 1024, 200_000, sync=True),
        Scenario("1MB", 1024 * 1024, 20_000, receiver_queue=50, max_pending=50),
        Scenario("20MB-chunked", 20 * 1024 * 1024, 1_000, chunking=True, receiver_queue=20, max_pending=100),
    )
}


def _size_label(size: int) -> str:
    for unit, scale in (("MB", 1024 * 1024), ("KB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


@dataclass(frozen=True)
class Limits:
    duration_s: float
    idle_timeout_s: float = 15.0


# -- one run -------------------------------------------------------------------------------------------------


def run_once(
    spec: BrokerSpec,
    scenario: Scenario,
    mode: str,
    limits: Limits,
    source: MagnetarSource,
    workdir: Path,
    profile_to: Path | None = None,
    profile_native: bool = False,
) -> dict[str, object]:
    """Start a broker, run ``scenario`` in ``mode`` against it, stop it; the run's figures as a dict.

    With ``profile_to``, py-spy samples a Magnetar broker for the whole run (its figures are then disturbed).
    """
    base = {"broker": spec.name, "scenario": scenario.name, "mode": mode, "size": scenario.size}
    broker = make_process(spec, workdir, source)
    try:
        broker.start()
    except BrokerStartError as exc:
        return {**base, "error": str(exc)}
    profiler = None
    if profile_to and spec.kind == MAGNETAR:
        profiler = start_profiler(broker.pid, profile_to, profile_native)
    result = dict(base)
    try:
        result.update(_measure(broker.service_url, broker.pid, scenario, mode, limits))
    except Exception as exc:  # a broken run is a result, not the end of the benchmark
        result.update(error=f"{type(exc).__name__}: {exc}", broker_log=broker.log_tail(2000))
    finally:
        exit_code = broker.stop()
        if profiler is not None:
            stop_profiler(profiler)
        if exit_code != 0:
            result["broker_exit_code"] = exit_code
            result.setdefault("broker_log", broker.log_tail(2000))
        shutil.rmtree(workdir / "data", ignore_errors=True)
    return result


def _measure(
    url: str, pid: int, scenario: Scenario, mode: str, limits: Limits, **client_options: object
) -> dict[str, object]:
    client = make_client(url, **client_options)
    topic = f"persistent://public/default/bench-{scenario.name}-{mode}-{uuid.uuid4().hex[:8]}"
    try:
        cpu0 = time.process_time()
        with UsageSampler(pid) as sampler:
            run = _concurrent if mode == "concurrent" else _backlog
            produced, tally, consume_s, error = run(client, topic, scenario, limits)
            usage = sampler.usage()
        client_cpu_s = time.process_time() - cpu0
    finally:
        client.close()
    return _figures(scenario, produced, tally, consume_s, error, usage, client_cpu_s)


def _subscribe(client: pulsar.Client, topic: str, scenario: Scenario) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "bench",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=scenario.receiver_queue,
    )


def _producer(client: pulsar.Client, topic: str, scenario: Scenario) -> pulsar.Producer:
    return client.create_producer(
        topic,
        batching_enabled=scenario.batching,
        batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=128 * 1024,
        batching_max_publish_delay_ms=10,
        chunking_enabled=scenario.chunking,
        max_pending_messages=scenario.max_pending,
        block_if_queue_full=True,
        send_timeout_millis=30_000,
    )


def _producing(client: pulsar.Client, topic: str, scenario: Scenario) -> Producing:
    producer, payloads = _producer(client, topic, scenario), Payloads(scenario.size)
    return Producing(producer, payloads, scenario.sync, scenario.window, scenario.receipt_group)


def _concurrent(client, topic, scenario, limits) -> tuple[Produced, Tally, float, str | None]:
    consumer = _subscribe(client, topic, scenario)
    producing = _producing(client, topic, scenario)
    consuming = Consuming(consumer, producing.payloads, producing, scenario.chunking).start(
        limits.idle_timeout_s
    )
    start = time.monotonic()
    produced = producing.run(limits.duration_s, scenario.max_messages, limits.idle_timeout_s)
    tally = consuming.join(_join_timeout(produced, limits))
    consumer.close()
    return produced, tally, max(consuming.last_new - start, 1e-9), consuming.error


def _backlog(client, topic, scenario, limits) -> tuple[Produced, Tally, float, str | None]:
    _subscribe(client, topic, scenario).close()  # the subscription keeps the backlog from the first entry
    producing = _producing(client, topic, scenario)
    produced = producing.run(limits.duration_s, scenario.max_messages, limits.idle_timeout_s)
    start = time.monotonic()
    consumer = _subscribe(client, topic, scenario)
    consuming = Consuming(consumer, producing.payloads, producing, scenario.chunking).start(
        limits.idle_timeout_s
    )
    tally = consuming.join(_join_timeout(produced, limits))
    consumer.close()
    return produced, tally, _drain_time(consuming, tally, start), consuming.error


def _drain_time(consuming: Consuming, tally: Tally, subscribed: float) -> float:
    """Time to drain, scaled so that ``unique / time`` is the rate from the first message to the last.

    The subscribe's round trips before the first message are not part of a drain rate.
    """
    if tally.unique > 1 and consuming.last_new > consuming.first_at:
        return (consuming.last_new - consuming.first_at) * tally.unique / (tally.unique - 1)
    return max(consuming.last_new - subscribed, 1e-9)


def _join_timeout(produced: Produced, limits: Limits) -> float:
    return 60.0 + limits.idle_timeout_s + 10 * produced.elapsed_s


# -- the figures of one run ----------------------------------------------------------------------------------


def _figures(scenario, produced, tally, consume_s, error, usage, client_cpu_s) -> dict[str, object]:
    size_mb = scenario.size / MB
    delivered = tally.unique
    entries = len(tally.entries)
    figures: dict[str, object] = {
        "sent": produced.sent,
        "receipted": produced.receipts,
        "send_errors": produced.errors,
        "first_send_error": produced.first_error,
        "received": tally.received,
        "duplicates": tally.duplicates,
        "missing": tally.missing(produced.receipted),
        "out_of_order": tally.out_of_order,
        "corrupt": tally.corrupt,
        "unreceipted_delivered": tally.unreceipted(produced.receipted),
        "produce_s": produced.elapsed_s,
        "consume_s": consume_s,
        "produce_msg_s": produced.receipts / produced.elapsed_s,
        "produce_mb_s": produced.receipts * size_mb / produced.elapsed_s,
        "consume_msg_s": delivered / consume_s,
        "consume_mb_s": delivered * size_mb / consume_s,
        "entries": entries,
        "broker_cpu_s": usage.cpu_s,
        "cpu_us_per_entry": usage.cpu_s * 1e6 / entries if entries else None,
        "cpu_us_per_msg": usage.cpu_s * 1e6 / delivered if delivered else None,
        "peak_rss_mib": usage.peak_rss_kib / 1024,
        "hwm_rss_mib": usage.hwm_kib / 1024,
        "client_cpu_s": client_cpu_s,
        "error": error,
    }
    if scenario.sync:
        figures["latency_us"] = latency_summary(produced.latencies_us)
    return figures


def failures(result: dict[str, object]) -> list[str]:
    """What went wrong in one run, in words; empty when the run is clean."""
    problems = [
        f"{result[key]} {key.replace('_', ' ')}"
        for key in ("missing", "duplicates", "out_of_order", "corrupt", "send_errors")
        if result.get(key)
    ]
    if result.get("error"):
        problems.append(f"error: {result['error']}")
    if result.get("received") == 0 and not result.get("error"):
        problems.append("nothing received")
    return problems


def with_overrides(sizes: dict[str, int], caps: dict[str, int]) -> dict[str, Scenario]:
    """The scenario table with ``--size`` and ``--messages`` overrides applied."""
    table = {}
    for name, scenario in SCENARIOS.items():
        table[name] = replace(
            scenario, size=sizes.get(name, scenario.size), max_messages=caps.get(name, scenario.max_messages)
        )
    return table


def scenario_dict(scenario: Scenario) -> dict[str, object]:
    return {**asdict(scenario), "label": scenario.label}
