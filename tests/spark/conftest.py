"""A real broker process and one local[2] SparkSession for the whole session.

Spark is slow to start (about 5 s) and the machine has 2 cores, so every test shares one
session and one broker and works on topics of its own; tests that need another broker
configuration start their own.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.interop.conftest import BrokerProcess
from tests.needs import need_spark

need_spark()


@pytest.fixture(scope="session")
def spark(tmp_path_factory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    import magnetar.spark

    # Python workers must run this interpreter (the venv with magnetar), not the first python3 on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("magnetar-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker_factory_session(tmp_path_factory) -> Iterator[Callable[..., BrokerProcess]]:
    brokers: list[BrokerProcess] = []

    def start(config: dict[str, object] | None = None) -> BrokerProcess:
        broker = BrokerProcess(tmp_path_factory.mktemp("broker"), {"fsync_policy": "never", **(config or {})})
        brokers.append(broker)
        return broker.start()

    yield start
    for broker in brokers:
        broker.close()


@pytest.fixture(scope="session")
def broker(broker_factory_session) -> BrokerProcess:
    return broker_factory_session()


@pytest.fixture
def topic(request) -> str:
    name = re.sub(r"[^A-Za-z0-9-]", "-", request.node.name)[:40]
    return f"persistent://public/default/{name}-t{uuid.uuid4().hex[:8]}"  # never "-partition-N"


@pytest.fixture
def client(broker) -> Iterator[object]:
    from magnetar.client import Client

    with Client(broker.service_url, operation_timeout_seconds=10) as c:
        yield c
