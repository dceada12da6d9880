"""Fixtures for tiered storage: a Storage whose offloaded ledgers go to a real object store (a
directory through the filesystem driver, or the S3 server of ``s3_server.py``), no mocks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from magnetar.offload.drivers import open_store
from magnetar.offload.object_io import ObjectIO
from magnetar.offload.offloader import LedgerOffloader
from magnetar.offload.settings import OffloadSettings
from magnetar.storage import ManagedLedger, Storage, StorageConfig

from .s3_server import BUCKET, S3Server

TOPIC = "persistent://public/default/camera-frames"
#: Three entries of 20 bytes (28 with their record header) per ledger.
SMALL = {"max_ledger_size_bytes": 80}


@pytest.fixture
def fs_settings(tmp_path: Path) -> OffloadSettings:
    return OffloadSettings("filesystem", file_system_uri=f"file://{tmp_path / 'offloaded'}")


@pytest.fixture
def offloader(fs_settings: OffloadSettings) -> Iterator[LedgerOffloader]:
    offloader = LedgerOffloader(fs_settings)
    yield offloader
    offloader.close()


@pytest.fixture
def open_tiered(tmp_path: Path, offloader: LedgerOffloader) -> Iterator[Callable[..., Storage]]:
    """A Storage on tmp_path/data reading offloaded ledgers through ``offloader``'s store."""
    opened: list[Storage] = []

    def factory(io: ObjectIO | None = None, **overrides: object) -> Storage:
        config = StorageConfig(tmp_path / "data", **{**SMALL, **overrides})
        storage = Storage(config, object_reader=io if io is not None else offloader.io)
        opened.append(storage)
        return storage

    yield factory
    for storage in reversed(opened):
        storage.close()


def objects(root: Path) -> list[Path]:
    """The objects a filesystem store holds (files; obstore's own staging files aside)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and "#" not in p.name)


def offload_all(offloader: LedgerOffloader, ml: ManagedLedger) -> list[int]:
    """Offload every closed local ledger, oldest first; the ids offloaded."""
    done = []
    for info in ml.ledgers()[:-1]:
        if info.offload is None and offloader.offload_ledger(ml, info.ledger_id):
            done.append(info.ledger_id)
    return done


def io_for(settings: OffloadSettings) -> ObjectIO:
    return ObjectIO(open_store(settings), settings)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One S3 protocol server (moto) for a module's tests, with the bucket made."""
    server = S3Server(tmp_path_factory.mktemp("s3"))
    try:
        server.create_bucket()
        yield server
    finally:
        server.stop()


def s3_settings(server: S3Server, tmp_path: Path, **overrides: object) -> OffloadSettings:
    """The aws-s3 driver pointed at ``server``, its credentials read from a file."""
    credentials = tmp_path / "s3-credentials"
    credentials.write_text(
        "# moto takes any key\naccess_key_id=magnetar-test\nsecret_access_key=not-a-secret\n"
    )
    values: dict = {
        "bucket": BUCKET,
        "region": "us-east-1",
        "service_endpoint": server.endpoint,
        "credentials_file": str(credentials),
        "timeout_seconds": 1.0,
        **overrides,
    }
    return OffloadSettings("aws-s3", **values)
