"""The web console (docs/console.md): its page at ``/console`` and the few answers it needs that
Pulsar's admin API has no path for. Everything else the console shows or does goes through the
admin API's own paths, under the same authentication and authorization as any admin client.

- ``/console``: the console's own static files (``console/``: HTML, CSS, JavaScript, no build
  step), served without credentials: they hold nothing but the page; every figure it shows comes
  from the paths below and the admin API, with the token the reader logs in with.
- ``GET /admin/v2/console/session``: who the request's token proves (its role) and what it may
  administer: ``superuser``, or the tenants it is an admin of; the console hides its actions
  elsewhere (and the admin API refuses them anyway).
- ``GET /admin/v2/console/overview``: the broker at a glance (console_figures.py); with workers,
  every worker's part.
- ``GET /admin/v2/console/namespaces``: the tenants and namespaces the role may list topics of.
- ``GET /admin/v2/console/topics/{tenant}/{namespace}?search=&offset=&limit=``: one page of a
  namespace's topics (topic_pages.py) with the loaded ones' rates, backlog and storage.

Off with ``web_console_enabled = false``: none of these paths is served.
"""

from __future__ import annotations

import asyncio
import json
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from magnetar.admin import every_worker, topic_pages
from magnetar.admin.auth import ROLE
from magnetar.admin.console_figures import DataDirUse, add_figures, combine, process_overview, row_figures
from magnetar.admin.errors import translate_errors

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

#: Where the console's page is served, and the prefix of its API paths.
PAGE = "/console"
API = "/admin/v2/console"
#: The page's files: a folder of the installed package (package data in pyproject.toml).
STATIC = "console"
#: The page runs only its own files: no inline script, nothing from elsewhere, never in a frame.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def static_dir() -> Path:
    """The folder of the console's files inside the installed package."""
    return Path(str(resources.files("magnetar.admin").joinpath(STATIC)))


def add_routes(app: web.Application, service: BrokerService) -> None:
    if not service.config.web_console_enabled:
        return
    _page_routes(app)
    _api_routes(app, service)


def _page_routes(app: web.Application) -> None:
    folder = static_dir()

    async def index(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(folder / "index.html", headers=HEADERS)

    async def to_index(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{PAGE}/")

    async def asset(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = folder / name
        if "/" in name or name.startswith(".") or not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path, headers=HEADERS)

    app.router.add_get(PAGE, to_index)
    app.router.add_get(f"{PAGE}/", index)
    app.router.add_get(f"{PAGE}/{{name}}", asset)


def session(service: BrokerService, role: str | None) -> dict[str, Any]:
    """What the console may offer ``role``: everything for a superuser (and for anyone while
    authentication or authorization is off), else the actions on the tenants it administers."""
    authz = service.authorization
    superuser = authz is None or role is None or authz.is_superuser(role)
    tenants = service.namespaces.tenants()
    return {
        "role": role,
        "authentication": service.authentication is not None,
        "authorization": authz is not None,
        "superuser": superuser,
        "adminTenants": tenants
        if superuser
        else [t for t in tenants if authz and authz.is_tenant_admin(t, role)],
        "cluster": service.config.cluster_name,
        "workers": service.config.worker_count(),
    }


def visible_namespaces(service: BrokerService, role: str | None) -> list[dict[str, Any]]:
    """Each tenant with the namespaces ``role`` may list the topics of (tenants with none left out
    for a role that is not a superuser)."""
    authz = service.authorization
    everything = authz is None or role is None or authz.is_superuser(role)
    answer = []
    for tenant in service.namespaces.tenants():
        names = service.namespaces.namespaces(tenant)
        if not everything and authz is not None and not authz.is_tenant_admin(tenant, role):
            names = [ns for ns in names if authz.can_list_topics(ns, role)]
            if not names:
                continue
        answer.append({"tenant": tenant, "namespaces": names})
    return answer


def _int_query(request: web.Request, name: str, default: int) -> int:
    value = request.query.get(name, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {value!r}") from None


def _api_routes(app: web.Application, service: BrokerService) -> None:
    started_at = time.time()
    use = DataDirUse(Path(service.config.data_dir))
    walking = asyncio.Lock()

    async def used_bytes() -> int:
        async with walking:
            if use.stale():
                await asyncio.to_thread(use.refresh)
        return use.bytes

    @translate_errors
    async def get_session(request: web.Request) -> web.Response:
        return web.json_response(session(service, request.get(ROLE)))

    @translate_errors
    async def overview(request: web.Request) -> web.Response:
        parts = [process_overview(service, started_at, await used_bytes())]
        missing: list[str] = []
        if every_worker.gathers(service, request):
            for part in await every_worker.other_parts(service, request):
                if part.ok:
                    parts.extend(json.loads(part.body)["workers"])
                else:
                    missing.append(part.worker)
        answer = combine(parts, missing)
        answer["cluster"] = service.config.cluster_name
        return web.json_response(answer)

    @translate_errors
    async def namespaces(request: web.Request) -> web.Response:
        return web.json_response(visible_namespaces(service, request.get(ROLE)))

    @translate_errors
    async def topics(request: web.Request) -> web.Response:
        info = request.match_info
        namespace = f"{info['tenant']}/{info['namespace']}"
        search = request.query.get("search", "")
        offset = _int_query(request, "offset", 0)
        limit = _int_query(request, "limit", topic_pages.PAGE_DEFAULT)
        topic_pages.bounds(offset, limit)
        registry = service.namespaces

        def paged(names: list[str]) -> topic_pages.Page:
            # On the listing thread, as the names: a namespace may hold 100,000 topics.
            partitioned = {
                name: registry.partitions(name)
                for domain in ("persistent", "non-persistent")
                for name in registry.partitioned_topics(namespace, domain)
            }
            return topic_pages.page(topic_pages.rows_of(names, partitioned), search, offset, limit)

        found = await service.listing_topics(namespace, None, paged)
        figures = row_figures(service, [(row.name, row.partitions) for row in found.rows])
        missing: list[str] = []
        if every_worker.gathers(service, request):
            for part in await every_worker.other_parts(service, request):
                if not part.ok:
                    missing.append(part.worker)
                    continue
                for row in json.loads(part.body)["topics"]:
                    if row["loaded"]:
                        theirs = {k: v for k, v in row.items() if k not in ("name", "loaded")}
                        mine = figures.setdefault(row["name"], {"loadedPartitions": 0})
                        add_figures(mine, theirs)
                        mine["loadedPartitions"] += theirs.get("loadedPartitions", 0)
        rows = [
            {**row.to_json(), "loaded": row.name in figures, **figures.get(row.name, {})}
            for row in found.rows
        ]
        end = found.offset + len(rows)
        query = {"search": search, "offset": end, "limit": found.limit}
        return web.json_response(
            {
                "namespace": namespace,
                "search": search,
                "total": found.total,
                "offset": found.offset,
                "limit": found.limit,
                "topics": rows,
                "next": f"{request.path}?{urlencode(query)}" if end < found.total else None,
                "missingWorkers": missing,
            }
        )

    app.router.add_get(f"{API}/session", get_session)
    app.router.add_get(f"{API}/overview", overview)
    app.router.add_get(f"{API}/namespaces", namespaces)
    app.router.add_get(f"{API}/topics/{{tenant}}/{{namespace}}", topics)
