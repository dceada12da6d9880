"""Answers about the whole broker when it is several workers: each worker's own answer, gathered by
whichever worker got the request on the one admin port.

``/metrics``, health and broker-wide stats describe what a process holds (its connections, its
loaded topics): with workers, one process is a part of the broker, so the worker that gets such a
request asks every other worker for its own part (the same path on the worker's own HTTP URL,
marked ``PROXIED_BY`` so that the other answers for itself alone) and puts the parts together. The
workers expected are ``worker-0`` to ``worker-{N-1}`` (the ``workers`` setting, given to each worker
by its supervisor); one that is not serving (restarting) or does not answer in time is named as
missing rather than left out silently.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.owner_calls import OWNER_CALLS, PROXIED_BY
from magnetar.broker.worker_role import WorkerRole

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

#: How long a worker may take to give its part: a scrape or a health probe must not hang on one.
PART_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Part:
    """One worker's answer: its status and body, or None where it gave none (``missing`` says why)."""

    worker: str
    status: int | None
    body: bytes
    missing: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def gathers(service: BrokerService, request: web.Request) -> bool:
    """Whether this request is for the whole broker: workers, and not a part asked by another."""
    return service.shares_bundles and PROXIED_BY not in request.headers


def expected_workers(service: BrokerService) -> list[str]:
    """The broker ids of every worker there should be."""
    return [WorkerRole(i).broker_id for i in range(service.config.worker_count())]


async def other_parts(service: BrokerService, request: web.Request, path: str | None = None) -> list[Part]:
    """Every other expected worker's answer to ``GET path`` (the request's own path by default)."""
    me = service.namespace_service.broker_id
    live = {info.broker_id: info for info in service.namespace_service.store.brokers()}
    calls = request.app[OWNER_CALLS]
    path = path or request.path

    async def one(worker: str) -> Part:
        info = live.get(worker)
        if info is None:
            return Part(worker, None, b"", "not serving")
        try:
            status, body, _ = await asyncio.wait_for(calls.call(request, info, "GET", path), PART_TIMEOUT_S)
        except TimeoutError:
            return Part(worker, None, b"", f"no answer within {PART_TIMEOUT_S:g} s")
        except web.HTTPException:  # it cannot be reached (owner_calls.py logged why)
            return Part(worker, None, b"", "cannot be reached")
        return Part(worker, status, body)

    others = [worker for worker in expected_workers(service) if worker != me]
    return list(await asyncio.gather(*(one(worker) for worker in others)))
