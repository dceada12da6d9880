"""One obstore store per offload driver (Pulsar's driver names; docs/tiered-storage.md).

obstore (Rust's object_store behind a Python API) is the one library behind every driver: S3 and
S3-compatible stores (``managed_ledger_offload_service_endpoint``), Google Cloud Storage, Azure Blob
and a local or NFS-mounted directory, each with ranged reads, multipart uploads and retries with
backoff. Credentials: the store's own environment variables (AWS_ACCESS_KEY_ID ..., GOOGLE_* ...,
AZURE_STORAGE_* ...), or a credentials file; they never reach a log line.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from obstore.store import AzureStore, GCSStore, LocalStore, ObjectStore, S3Store

from magnetar.offload.settings import OffloadSettings


def read_credentials(path: str) -> dict[str, str]:
    """``name=value`` lines (blank lines and ``#`` comments skipped); ValueError for anything else,
    naming the line but never its value."""
    options: dict[str, str] = {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read the offload credentials file {path}: {exc.strerror or exc}") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{path}, line {number}: expected name=value")
        options[name.strip().lower()] = value.strip()
    return options


def filesystem_root(uri: str) -> Path:
    """The directory of a ``file_system_uri``: ``file:///path`` or a plain path."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return Path(parts.path if parts.scheme else uri)
    raise ValueError(f"file_system_uri {uri!r}: only local paths and file:// URIs are supported")


def open_store(settings: OffloadSettings) -> ObjectStore:
    """The store ``settings`` name (ValueError for a setting that is missing or wrong)."""
    settings.check()
    # Any: obstore types each store's keys (TypedDicts); these come from settings files as text.
    options: Any = dict(settings.options)
    if settings.credentials_file:
        options.update(read_credentials(settings.credentials_file))
    timeout = f"{settings.timeout_seconds:g}s"
    client: Any = {"timeout": timeout, "connect_timeout": timeout}
    retry: Any = {
        "max_retries": 3,
        "retry_timeout": timedelta(seconds=settings.timeout_seconds),
        "backoff": {
            "init_backoff": timedelta(milliseconds=100),
            "max_backoff": timedelta(seconds=5),
            "base": 2,
        },
    }
    kind = settings.kind
    if kind == "filesystem":
        root = filesystem_root(settings.file_system_uri or "")
        return LocalStore(root, mkdir=True)
    endpoint = settings.service_endpoint
    if endpoint:
        options.setdefault("endpoint", endpoint)
        if endpoint.startswith("http://"):
            client["allow_http"] = True
    if kind == "s3":
        if settings.region:
            options.setdefault("region", settings.region)
        return S3Store(settings.bucket, config=options, client_options=client, retry_config=retry)
    if kind == "gcs":
        if settings.gcs_service_account_key_file:
            options.setdefault("service_account_path", settings.gcs_service_account_key_file)
        return GCSStore(settings.bucket, config=options, client_options=client, retry_config=retry)
    return AzureStore(settings.bucket, config=options, client_options=client, retry_config=retry)
