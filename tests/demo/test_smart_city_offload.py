"""The main job with ``--offload-frames``: the camera frames topic's closed ledgers go to a
filesystem store as they close (their local copies deleted), and at the end every frame is read
back from the store and checked again."""

from __future__ import annotations

import dataclasses
import io

import pytest

from magnetar.demo.smart_city.run import run_job
from tests.demo.test_smart_city import SMALL
from tests.needs import need_spark
from tests.offload.conftest import objects

need_spark()
pytestmark = pytest.mark.spark  # Spark in this process: one xdist worker for all (tests/conftest.py)


@pytest.mark.timeout(300)
def test_the_camera_frames_are_kept_in_tiered_storage_and_read_back_intact(tmp_path):
    store = tmp_path / "archive"
    settings = dataclasses.replace(SMALL, offload_frames=True, offload_dir=str(store))
    out = io.StringIO()
    summary = run_job(settings, out)
    text = out.getvalue()

    archive = summary.archive
    assert archive is not None and not archive.error, text
    assert archive.ledgers >= 1 and len(objects(store)) >= archive.ledgers, text
    assert archive.frames_intact == archive.frames_read == archive.frames_expected == 2, text
    assert archive.read_from_store_bytes > 0, text  # read back from the store, not from memory
    assert "frames archive" in text and summary.ok, text
    # The rest of the job is as without the flag.
    assert summary.frames_intact == summary.frames_sent == 2 and not summary.missing_alerts, text


def test_the_archive_is_a_flag_off_by_default():
    from click.testing import CliRunner

    from magnetar.demo.smart_city.cli import smart_city
    from magnetar.demo.smart_city.settings import CitySettings

    shown = CliRunner().invoke(smart_city, ["--help"], terminal_width=200).output
    assert "--offload-frames" in shown and "--offload-dir" in shown, shown
    assert CitySettings().offload_frames is False  # `make run` stays as quick as before
    with pytest.raises(ValueError, match="offload-frames"):
        CitySettings.from_values({"offload_frames": True, "districts": 2})
