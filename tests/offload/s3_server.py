"""The S3 protocol server (moto) the tiered-storage tests start: the benchmark's
(``bench/s3_server.py``), one implementation for both."""

from bench.s3_server import BUCKET, S3Server

__all__ = ["BUCKET", "S3Server"]
