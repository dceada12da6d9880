"""Magnetar: a small, durable message broker speaking the Apache Pulsar binary protocol."""

__version__ = "0.1.0"
