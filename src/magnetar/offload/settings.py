"""The offload driver's settings, as the broker's configuration gives them (Pulsar's names in
snake_case: docs/configuration.md). Secrets are never part of ``describe()``, nor of any log line."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Pulsar's driver names (``managedLedgerOffloadDriver``), compared without case.
S3_DRIVERS = ("aws-s3", "s3")
GCS_DRIVER = "google-cloud-storage"
AZURE_DRIVER = "azureblob"
FILESYSTEM_DRIVER = "filesystem"
DRIVERS = ("aws-s3", "S3", GCS_DRIVER, AZURE_DRIVER, FILESYSTEM_DRIVER)


@dataclass(frozen=True)
class OffloadSettings:
    """Where offloaded ledgers go and how they are written and read."""

    driver: str
    bucket: str | None = None
    region: str | None = None
    service_endpoint: str | None = None
    #: The filesystem driver's root: a path or a ``file://`` URI (Pulsar's fileSystemURI).
    file_system_uri: str | None = None
    #: A file of ``name=value`` lines with the store's credentials (obstore's config keys, e.g.
    #: ``aws_access_key_id``); without it they come from the environment (AWS_*, GOOGLE_*, AZURE_*).
    credentials_file: str | None = None
    #: Google Cloud's service-account key file (Pulsar's gcsManagedLedgerOffloadServiceAccountKeyFile).
    gcs_service_account_key_file: str | None = None
    #: Threads that upload ledgers (Pulsar's managedLedgerOffloadMaxThreads).
    max_threads: int = 2
    #: Threads that read offloaded ranges.
    read_threads: int = 2
    #: Multipart part size of uploads (Pulsar's managedLedgerOffloadMaxBlockSizeInBytes).
    max_block_size_in_bytes: int = 64 * 1024 * 1024
    #: One request to the store gives up after this long (then it counts as failed).
    timeout_seconds: float = 30.0
    #: Extra options passed to the store as they are (obstore's config keys); never logged.
    options: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def kind(self) -> str:
        """The driver's family: ``s3``, ``gcs``, ``azure`` or ``filesystem``."""
        name = self.driver.lower()
        if name in S3_DRIVERS:
            return "s3"
        if name == GCS_DRIVER:
            return "gcs"
        if name == AZURE_DRIVER:
            return "azure"
        if name == FILESYSTEM_DRIVER:
            return "filesystem"
        raise ValueError(f"managed_ledger_offload_driver {self.driver!r} is not one of {', '.join(DRIVERS)}")

    def check(self) -> None:
        """ValueError naming the setting that is missing or wrong."""
        kind = self.kind
        if kind == "filesystem":
            if not self.file_system_uri:
                raise ValueError("the filesystem offload driver needs file_system_uri (a directory)")
        elif not self.bucket:
            raise ValueError(f"the {self.driver} offload driver needs managed_ledger_offload_bucket")

    def describe(self) -> str:
        """Where offloaded ledgers go, for logs and stats (no credentials)."""
        if self.kind == "filesystem":
            return f"filesystem {self.file_system_uri}"
        endpoint = f" at {self.service_endpoint}" if self.service_endpoint else ""
        return f"{self.driver} bucket {self.bucket}{endpoint}"
