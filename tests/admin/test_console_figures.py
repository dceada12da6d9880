"""The broker at a glance from every worker's part (console_figures.combine), and the data
directory's size walked from real files."""

from __future__ import annotations

from magnetar.admin.console_figures import DataDirUse, combine


def part(worker: str, *, connections: int, backlog: int, writable: bool, used: int, remote: dict) -> dict:
    return {
        "worker": worker,
        "pid": 1,
        "startedAt": 1000.0 if worker == "worker-0" else 1005.0,
        "uptimeSeconds": 1.0,
        "connections": connections,
        "topicsLoaded": 2,
        "msgInCounter": 10,
        "backlog": backlog,
        "storage": {
            "dataDir": "/d",
            "usedBytes": used,
            "freeBytes": 5,
            "totalBytes": 10,
            "minFreeBytes": 0,
            "writable": writable,
            "belowMinFree": False,
            "refusingCount": 0 if writable else 1,
            "refusingTopics": [] if writable else [f"persistent://t/n/{worker}"],
        },
        "replication": remote,
    }


def test_workers_parts_add_up():
    east = {"topics": 1, "backlog": 4, "delaySeconds": 2.0, "connected": 1, "rateOut": 1.5}
    east2 = {"topics": 2, "backlog": 1, "delaySeconds": 7.0, "connected": 1, "rateOut": 0.5}
    total = combine(
        [
            part("worker-0", connections=3, backlog=5, writable=True, used=100, remote={"east": east}),
            part("worker-1", connections=4, backlog=6, writable=False, used=120, remote={"east": east2}),
        ],
        ["worker-2"],
    )
    assert (total["connections"], total["topicsLoaded"], total["backlog"], total["msgInCounter"]) == (
        7,
        4,
        11,
        20,
    )
    assert total["missingWorkers"] == ["worker-2"]
    assert total["startedAt"] == 1000.0
    storage = total["storage"]
    assert storage["usedBytes"] == 120  # one data directory, shared: the largest walk, not the sum
    assert not storage["writable"]
    assert storage["refusingTopics"] == ["persistent://t/n/worker-1"]
    assert total["replication"]["east"] == {
        "topics": 3,
        "backlog": 5,
        "delaySeconds": 7.0,
        "connected": 2,
        "rateOut": 2.0,
    }


def test_the_data_directory_walk_counts_its_files(tmp_path):
    use = DataDirUse(tmp_path, max_age_s=60)
    assert use.stale()
    (tmp_path / "ledgers").mkdir()
    (tmp_path / "ledgers" / "a.log").write_bytes(b"x" * 100_000)
    assert use.refresh() >= 100_000
    assert not use.stale()
