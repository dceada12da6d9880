"""The benchmark harness's smoke run: tiny sizes, one repeat, every scenario and mode, under a minute.

It runs Magnetar with fsync on and off, and the peer too when ``pulsar-lite`` is installed (it comes with
the ``dev`` and ``bench`` extras; without it the harness runs Magnetar alone and says so in its report, and
``test_peer_installed`` fails the run under ``CI=true``).
Magnetar must lose, duplicate, reorder and corrupt nothing; the peer's own failures are reported by the
harness, and are not this test's to judge.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from bench.brokers import PEER, peer_installed
from bench.report import BEGIN, END

pytestmark = pytest.mark.slow  # slow: every benchmark scenario on both brokers (one module-wide run)

REPO_ROOT = Path(__file__).resolve().parents[2]
COUNTERS = ("duplicates", "missing", "out_of_order", "corrupt", "send_errors")
SCENARIOS = {"100B-batched", "1KB-sync", "1MB", "20MB-chunked"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, str]:
    out = tmp_path_factory.mktemp("bench-smoke")
    cmd = [sys.executable, "-m", "bench", "--smoke", "--workdir", str(out / "work")]
    cmd += ["--out-json", str(out / "bench.json"), "--out-md", str(out / "bench.md")]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert (out / "bench.json").exists(), f"no JSON report:\n{done.stderr[-5000:]}"
    assert (out / "bench.md").exists(), f"no markdown report:\n{done.stderr[-5000:]}"
    return done, json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


def test_every_scenario_and_mode_ran_on_every_broker(smoke):
    _, doc, _ = smoke
    brokers = {b["name"] for b in doc["brokers"]}
    expected = {"magnetar-fsync", "magnetar-nofsync"} | ({PEER} if peer_installed() else set())
    assert brokers == expected
    ran = {(r["broker"], r["scenario"], r["mode"]) for r in doc["runs"]}
    assert ran == {(b, s, m) for b in expected for s in SCENARIOS for m in ("concurrent", "backlog")}


def test_magnetar_loses_duplicates_reorders_and_corrupts_nothing(smoke):
    _, doc, _ = smoke
    for run in doc["runs"]:
        if run["broker"] == PEER:
            continue
        name = f"{run['broker']} {run['scenario']} {run['mode']}"
        assert run.get("error") is None, f"{name}: {run.get('error')}"
        assert {key: run[key] for key in COUNTERS} == dict.fromkeys(COUNTERS, 0), name
        assert run["received"] == run["receipted"] == run["sent"] > 0, name
        assert run["produce_msg_s"] > 0 and run["consume_msg_s"] > 0, name
        assert run["peak_rss_mib"] > 10, name
        if run["scenario"] == "1KB-sync":
            assert run["latency_us"]["n"] == run["sent"], name
    # The broker's CPU is counted in clock ticks (10 ms): a run of a few batched entries may take
    # less than one, but every broker that served them all did work.
    for broker in {run["broker"] for run in doc["runs"]} - {PEER}:
        assert sum(run["broker_cpu_s"] for run in doc["runs"] if run["broker"] == broker) > 0, broker


def test_exit_status_says_whether_any_run_failed(smoke):
    done, doc, _ = smoke
    assert all(line.startswith(PEER) for line in doc["failures"]), doc["failures"]
    assert done.returncode == (1 if doc["failures"] else 0), done.stderr[-5000:]


def test_markdown_has_the_tables_and_says_when_the_peer_is_missing(smoke):
    _, doc, md = smoke
    assert BEGIN in md and END in md
    for heading in ("### Throughput", "### Publish latency", "### Broker CPU and memory", "### Correctness"):
        assert heading in md
    assert "`nproc`" in md and doc["machine"]["cpu_model"] in md
    if peer_installed():
        assert "magnetar-fsync / peer" in md
    else:
        assert "pulsar-lite is not installed" in md and "/ peer" not in md


def test_the_pictures_are_drawn_beside_the_tables(smoke, tmp_path_factory):
    _, _, md = smoke
    for name in ("throughput.svg", "latency.svg"):
        assert f"](benchmarks/{name})" in md
    # the smoke run's folder (pytest also links it as bench-smokecurrent): each picture once
    pictures = sorted(
        {p.resolve() for p in Path(tmp_path_factory.getbasetemp()).glob("bench-smoke*/benchmarks/*.svg")}
    )
    assert sorted(p.name for p in pictures) == ["latency.svg", "throughput.svg"], pictures
    for picture in pictures:
        root = ElementTree.parse(picture).getroot()
        assert root.tag.endswith("svg") and "magnetar-fsync" in picture.read_text()
