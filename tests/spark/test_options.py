"""Strict options: unknown and misspelt names are refused, naming the nearest known one, and a
refused stream option surfaces as the connector's own error, not PySpark's UnboundLocalError."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from magnetar.spark.errors import InvalidOptionError
from magnetar.spark.known_options import SINK_OPTIONS, SOURCE_OPTIONS, SPARK_PASSED
from magnetar.spark.options import ReadOptions, WriteOptions
from tests.spark.support import produce, source_options

DOCS = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


@pytest.mark.parametrize("streaming", [True, False, None])
@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("maxOffsetPerTrigger", "did you mean maxOffsetsPerTrigger"),
        ("endingOffset", "did you mean endingOffsets"),
        ("startingoffset", "did you mean startingOffsets"),
        ("kafka.bootstrap.servers", "did you mean service_url"),
        ("subscribe", "did you mean topics"),
        ("failondataloss_", "did you mean failOnDataLoss"),
        ("fooBar", "docs/spark.md"),
    ],
)
def test_unknown_source_options_are_refused_naming_the_nearest(name, suggestion, streaming):
    with pytest.raises(InvalidOptionError, match=rf"unknown option '{re.escape(name)}' .*{suggestion}"):
        ReadOptions.parse({"topic": "a", name: "10"}, streaming=streaming)


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("compressionType", "docs/spark.md"),
        ("enableDedup", "did you mean enableDeduplication"),
        ("topics", "did you mean topic"),
        ("kafka.bootstrap.servers", "did you mean service_url"),
        ("maxOffsetsPerTrigger", "for the magnetar sink"),  # a source option
    ],
)
def test_unknown_sink_options_are_refused(name, suggestion):
    with pytest.raises(InvalidOptionError, match=rf"unknown option '{re.escape(name)}' .*{suggestion}"):
        WriteOptions.parse({"topic": "out", name: "x"})


def test_every_unknown_option_is_named_at_once():
    with pytest.raises(InvalidOptionError) as raised:
        ReadOptions.parse({"topic": "a", "fooBar": "1", "maxoffsetpertrigger": "2"}, streaming=True)
    assert "'fooBar'" in str(raised.value) and "'maxoffsetpertrigger'" in str(raised.value)


def test_options_spark_passes_and_any_case_are_accepted():
    spark_given = {"path": "p", "paths": '["p"]', "checkpointlocation": "/tmp/ck", "queryname": "q"}
    read = ReadOptions.parse({"TOPIC": "a", "MAXOFFSETSPERTRIGGER": "5", **spark_given}, streaming=True)
    assert read.max_offsets_per_trigger == 5
    secured = {"pulsar.client.tlsAllowInsecureConnection": "true", "adminUrl": "http://h:1"}
    write = WriteOptions.parse({"topic": "out", "SortBeforeWrite": "true", **spark_given, **secured})
    assert write.sort_before_write and write.security.tls_allow_insecure_connection
    assert write.admin_url == "http://h:1"


def test_schema_time_check_leaves_out_only_what_depends_on_the_kind_of_read():
    """``streaming=None`` (DataSource.schema()) accepts what a batch or a stream would accept."""
    ReadOptions.parse({"topic": "a", "endingOffsets": "latest"}, streaming=None)
    ReadOptions.parse({"topic": "a", "startingOffsets": "latest"}, streaming=None)
    with pytest.raises(InvalidOptionError, match="must be an integer"):
        ReadOptions.parse({"topic": "a", "minPartitions": "many"}, streaming=None)


def _documented(section: str) -> set[str]:
    """Names in the first column of the option tables (header ``| option |``) of a docs section."""
    text = DOCS.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    in_table = False
    for line in body.splitlines():
        if line.startswith("| option |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            names.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def test_docs_tables_list_exactly_the_known_options():
    security = _documented("Authentication and TLS")
    assert security, "no security option table found"
    assert {n.lower() for n in _documented("Read options") | security} == {
        n.lower() for n in SOURCE_OPTIONS if n not in SPARK_PASSED
    }
    assert {n.lower() for n in _documented("The sink") | security} == {
        n.lower() for n in SINK_OPTIONS if n not in SPARK_PASSED
    }


# -- through Spark ------------------------------------------------------------------------------------


def test_misspelt_option_fails_load(spark):
    reader = spark.readStream.format("magnetar").option("topic", "a").option("maxOffsetPerTrigger", "10")
    refused = r"InvalidOptionError: unknown option .*did you mean maxOffsetsPerTrigger"
    with pytest.raises(Exception, match=refused):
        reader.load()


def test_stream_only_refusal_ends_in_the_connectors_error(spark, tmp_path):
    df = spark.readStream.format("magnetar").option("topic", "a").option("endingOffsets", "latest").load()
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start()
    with pytest.raises(Exception) as raised:
        query.awaitTermination(60)
    text = str(raised.value)
    assert "UnboundLocalError" not in text
    last_error_line = [line for line in text.splitlines() if "Error" in line][-1]
    assert last_error_line.startswith("magnetar.spark.errors.InvalidOptionError: endingOffsets is for batch")


def test_unknown_sink_option_fails_the_write(spark):
    df = spark.createDataFrame([("v",)], "value string")
    writer = df.write.format("magnetar").mode("append").option("topic", "out")
    refused = r"InvalidOptionError: unknown option 'compressiontype' for the magnetar sink"
    with pytest.raises(Exception, match=refused):
        writer.option("compressionType", "lz4").save()


def test_service_url_at_the_http_port_says_so(spark, broker, client, topic):
    produce(client, topic, ["v"])
    options = source_options(broker, topic=topic, service_url=f"pulsar://127.0.0.1:{broker.http_port}")
    reader = spark.read.format("magnetar").options(**options)
    with pytest.raises(Exception, match=r"HttpPortError: .*answered with HTTP .*is this the admin port\?"):
        reader.load().collect()
