"""A worker process driving its slice of the consumers through the official pulsar-client.

It keeps the lean figures honest: the same subscription, the same broadcast property, but a
real client's receive path (its own threads, receiver queue, individual acks as applications
usually send them). The official client does not expose the broker timestamp, so its latency
is measured from the publish time only. Same pipe conversation as ``worker.py``. In exclusive
mode each consumer has a subscription of its own; with chunked messages the client reassembles
them, and each message's size is checked (a short one does not count).
"""

from __future__ import annotations

import threading
import time
from multiprocessing.connection import Connection

from bench.lean.histogram import LatencyHistogram
from bench.lean.limits import raise_nofile
from bench.lean.stamp import STAMP
from bench.lean.tally import Tally
from bench.lean.worker import WorkerSpec

BROADCAST = {"magnetar.subscription.type": "Broadcast"}
CONSUMERS_PER_CLIENT = 200
#: A refused subscribe (ConsumerBusy) is retried by the client until this timeout: kept short.
OPERATION_TIMEOUT_S = 30


def official_main(pipe: Connection, spec: WorkerSpec, log_path: str) -> None:
    """Process entry point (spawned)."""
    import pulsar

    raise_nofile(spec.consumers + 1024)
    lock = threading.Lock()
    done = threading.Event()
    tally = Tally(spec.consumers, spec.messages)
    from_publish = LatencyHistogram()
    wrong_size = [0]
    target = [spec.consumers]

    def listener(index: int):
        def on_message(consumer, msg) -> None:
            now_us = time.time_ns() // 1000
            data = msg.data()
            seq = STAMP.unpack_from(data)[1]
            with lock:
                if spec.size and len(data) != spec.size:
                    wrong_size[0] += 1
                else:
                    from_publish.record(now_us - msg.publish_timestamp() * 1000)
                    if tally.record(index, seq) and tally.complete == target[0]:
                        done.set()
            consumer.acknowledge(msg)

        return on_message

    pipe.send(("ready", {"loop": "pulsar-client"}))
    assert pipe.recv()[0] == "go"
    logger = pulsar.FileLogger(pulsar.LoggerLevel.Warn, log_path)
    url = f"pulsar://127.0.0.1:{spec.port}"
    clients = [
        pulsar.Client(url, operation_timeout_seconds=OPERATION_TIMEOUT_S, logger=logger)
        for _ in range(max(1, -(-spec.consumers // CONSUMERS_PER_CLIENT)))
    ]
    start = time.monotonic()
    errors: list[str] = []
    failed = 0
    for i in range(spec.consumers):
        if failed:  # the first refusal ends the slice: the rest would wait out the same timeout
            failed += 1
            continue
        try:
            number = spec.first_global + i
            clients[i % len(clients)].subscribe(
                spec.topic,
                f"{spec.subscription}-{number}" if spec.exclusive else spec.subscription,
                consumer_type=pulsar.ConsumerType.Exclusive,
                consumer_name=f"{spec.name_prefix}-{number}",
                properties={} if spec.exclusive else BROADCAST,
                receiver_queue_size=spec.permits,
                message_listener=listener(i),
            )
        except pulsar.PulsarException as exc:
            failed += 1
            if len(errors) < 20:
                errors.append(f"consumer {i}: {exc!r}")
    pipe.send(("subscribed", {"connect_s": round(time.monotonic() - start, 3), "failed": failed}))
    with lock:
        target[0] = spec.consumers - failed
        if spec.messages == 0 or tally.complete >= target[0]:
            done.set()
    while not pipe.poll(0.05):
        if done.is_set():
            pipe.send(("done", {"at": time.monotonic()}))
            break
    command = pipe.recv()
    assert command[0] == "report", command
    for client in clients:
        client.close()
    with lock:
        report = {
            "worker": spec.index,
            "kind": "official",
            "tally": tally.summary(),
            "chunks": {"wrong_size": wrong_size[0]} if spec.chunked else None,
            "failed_consumers": failed,
            "closed_by_broker": 0,
            "errors": errors,
            "from_broker": LatencyHistogram().to_state(),
            "from_publish": from_publish.to_state(),
        }
    pipe.send(("report", report))
