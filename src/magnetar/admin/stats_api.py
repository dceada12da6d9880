"""Topic stats over Pulsar's admin v2 paths: ``.../{topic}/stats`` for one topic (or partition),
``.../{topic}/partitioned-stats`` for a partitioned topic, its partitions summed, and
``.../{topic}/internalStats``: the managed ledger and its cursors.

Field names are Pulsar's TopicStats ones. Rates are over the last stats interval
(``broker/traffic.py``); counters are totals since the topic was loaded.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin import spread_stats
from magnetar.admin.consumers_api import consumer_page, page_path
from magnetar.admin.errors import partitions_of, persistent, single_topic, topic_of, translate_errors
from magnetar.admin.partition_fanout import each_partition
from magnetar.broker.compacted_topic import COMPACTED_TOPIC_LEDGER, COMPACTION_SUBSCRIPTION
from magnetar.broker.compaction_stats import CompactionRecord
from magnetar.broker.dispatchers.broadcast_stats import PAGE_LIMIT, STATS_CONSUMERS, is_broadcast
from magnetar.broker.follower_topic import link_worker
from magnetar.broker.offloads import Offloads
from magnetar.broker.replication import cursor_name, replication_stats

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.dispatchers.base import Dispatcher
    from magnetar.broker.nonpersistent import NonPersistentSubscription, NonPersistentTopic
    from magnetar.broker.service import BrokerService
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic
    from magnetar.broker.traffic import Traffic
    from magnetar.protocol.topic_name import TopicName
    from magnetar.storage.managed_ledger import ManagedLedger

#: Fields summed over partitions: a topic's and a publisher's (in), a subscription's (out).
_IN = ("msgRateIn", "msgThroughputIn", "msgInCounter", "bytesInCounter")
_OUT = ("msgRateOut", "msgThroughputOut", "msgOutCounter", "bytesOutCounter")


def _in(traffic: Traffic) -> dict:
    return {
        "msgRateIn": traffic.rate_in,
        "msgThroughputIn": traffic.throughput_in,
        "averageMsgSize": traffic.average_message_size_in,
        "msgInCounter": traffic.messages_in,
        "bytesInCounter": traffic.bytes_in,
    }


def _out(traffic: Traffic) -> dict:
    return {
        "msgRateOut": traffic.rate_out,
        "msgThroughputOut": traffic.throughput_out,
        "msgOutCounter": traffic.messages_out,
        "bytesOutCounter": traffic.bytes_out,
    }


def _listed(
    sub: PersistentSubscription | NonPersistentSubscription, links: list[Consumer] | None
) -> tuple[list, dict]:
    """The consumers topic stats list, and for a broadcast subscription (maybe 100K consumers)
    only the first ``STATS_CONSUMERS`` and where to page the rest (consumers_api.py). ``links``:
    the other workers' links of a spread topic at its owner, neither listed nor counted
    (spread_stats.py puts in what they serve)."""
    consumers = sub.consumers
    if not is_broadcast(sub):
        return list(consumers), {}
    serving = (c for c in consumers if links is None or link_worker(c.name) is None)
    listed = list(islice(serving, STATS_CONSUMERS))
    detached = getattr(sub.dispatcher, "detached", {})
    name = sub.topic.name
    where = f"{name.tenant}/{name.namespace}/{name.local_name}"
    return listed, {
        "consumersCount": len(consumers) - len(links or ()),
        "consumersListed": len(listed),
        "detachedCount": sum(1 for kept in detached if links is None or link_worker(kept) is None),
        "consumersPage": page_path(name.domain, where, sub.name, 0, PAGE_LIMIT),
    }


def consumer_stats(c: Consumer, dispatcher: Dispatcher | None) -> dict:
    """One consumer as topic stats list it (Pulsar's ConsumerStats fields)."""
    return {
        "consumerName": c.name,
        "address": c.address,
        **_out(c.traffic),
        "availablePermits": c.permits,
        "unackedMessages": len(c.pending_acks),
        **(dispatcher.consumer_stats(c) if dispatcher is not None else {}),
    }


def link_stats(link: Consumer) -> dict:
    """A spread topic's link at its owner: what it carried to its worker's follower (each entry
    once, however many consumers the follower serves) and what it has not acknowledged."""
    return {**_out(link.traffic), "unackedMessages": len(link.pending_acks), "address": link.address}


def _less(out: dict, links: list[Consumer]) -> dict:
    """``out`` (``_out`` figures) less what went to ``links``."""
    for link in links:
        for field, value in _out(link.traffic).items():
            out[field] -= value
    return out


def subscription_stats(
    sub: PersistentSubscription | NonPersistentSubscription, links: list[Consumer] | None = None
) -> dict:
    """A subscription's stats; ``links``: those of the subscription of a spread topic at its owner
    (spread_stats.links), left out with what they were sent, for spread_stats.py to merge the
    consumers each worker serves."""
    cursor = sub.cursor  # None on a non-persistent topic: nothing is kept, so no backlog
    dispatcher = sub.dispatcher
    listed, paging = _listed(sub, links)
    stats = {
        **_less(_out(sub.traffic), links or []),
        "msgBacklog": cursor.backlog() if cursor is not None else 0,
        "durable": sub.durable,
        "type": sub.type_name,
        "consumers": [consumer_stats(c, dispatcher) for c in listed],
        **paging,
    }
    if links:  # what each other worker's follower was sent over its link (Magnetar's own field)
        stats["spreadLinks"] = {link_worker(c.name): link_stats(c) for c in links}
    if dispatcher is not None and (extra := dispatcher.stats()):
        stats["dispatcher"] = extra  # Magnetar's own figures, e.g. a broadcast one's reads
    if cursor is None:  # non-persistent: what no consumer had permits for is dropped
        stats["msgDropRate"] = sub.traffic.drop_rate
    else:
        stats.update(
            markDeletePosition=str(cursor.mark_delete_position),
            readPosition=str(cursor.read_position),
            individuallyDeletedMessages=cursor.individually_deleted_count(),
            ackState=cursor.stats(),
        )
    return stats


#: What a topic never compacted shows (a non-persistent one, which has nothing to compact).
_NEVER_COMPACTED = CompactionRecord()


def _compaction_record(topic: PersistentTopic | NonPersistentTopic) -> CompactionRecord:
    compaction = getattr(topic, "compaction", None)
    return _NEVER_COMPACTED if compaction is None else compaction.record


def topic_stats(
    topic: PersistentTopic | NonPersistentTopic, offloads: Offloads | None = None, spread: bool = False
) -> dict:
    """Pulsar's TopicStats of a loaded topic; ``spread``: of a spread topic at its owner, the
    other workers' links left out (``subscription_stats``)."""
    ml = topic.ml
    subscriptions = topic.subscriptions
    links = {name: spread_stats.links(sub) for name, sub in subscriptions.items()} if spread else {}
    stats = {
        **_in(topic.traffic),
        **_less(_out(topic.traffic), [link for found in links.values() for link in found]),
        "storageSize": ml.size_bytes() if ml is not None else 0,
        **(offload_stats(topic.name, ml, offloads) if ml is not None else {}),
        "publishers": [
            {"producerId": p.producer_id, "producerName": p.name, **_in(p.traffic)}
            for p in topic.producers.values()
        ],
        "subscriptions": {
            name: subscription_stats(sub, links[name] if spread else None)
            for name, sub in subscriptions.items()
        },
        "ledgers": [
            {"ledgerId": info.ledger_id, "entries": info.entries, "size": info.size_bytes}
            for info in (ml.ledgers() if ml is not None else [])
        ],
        "lastConfirmedEntry": str(ml.last_confirmed) if ml is not None else None,
        "replication": replication_stats(topic) if ml is not None else {},
        # Pulsar's CompactionStats: the last compaction (zeros before the first one)
        "compaction": _compaction_record(topic).to_json(),
    }
    if ml is None:  # non-persistent, as Pulsar's: the subscriptions' drop rates added up
        stats["msgDropRate"] = sum(sub["msgDropRate"] for sub in stats["subscriptions"].values())
    return stats


def offload_stats(name: TopicName, ml: ManagedLedger, offloads: Offloads | None) -> dict:
    """Pulsar's offload fields of topic stats (tiered storage)."""
    state = offloads.of(name) if offloads is not None else None
    return {
        "offloadedStorageSize": ml.offloaded_size_bytes(),
        "lastOffloadLedgerId": state.last_ledger_id if state else 0,
        "lastOffloadSuccessTimeStamp": state.last_success_ms if state else 0,
        "lastOffloadFailureTimeStamp": state.last_failure_ms if state else 0,
    }


def _deleted_ranges(ranges: list[tuple[int, int, int]]) -> str:
    """Pulsar's ``individuallyDeletedMessages``, ``[(3:1..3:4], (3:6..3:8]]``: open-closed ranges
    of the entries acknowledged past the mark-delete position, from half-open entry id ranges."""
    return (
        "[" + ", ".join(f"({ledger}:{start - 1}..{ledger}:{end - 1}]" for ledger, start, end in ranges) + "]"
    )


def internal_stats(topic: PersistentTopic) -> dict:
    """Pulsar's PersistentTopicInternalStats: the managed ledger's ledgers and its cursors' state
    (every ack page is read for ``individuallyDeletedMessages``, as Pulsar lists them all)."""
    ml = topic.ml
    ledgers = ml.ledgers()
    current = ledgers[-1]
    cursors = {}
    for name, sub in topic.subscriptions.items():
        cursor = sub.cursor
        mark_delete, read = cursor.mark_delete_position, cursor.read_position
        ranges = cursor.individually_deleted_ranges()
        unacked_span = ml.number_of_entries(ml.next_position(mark_delete), read) if read > mark_delete else 0
        cursors[name] = {
            "markDeletePosition": str(mark_delete),
            "readPosition": str(read),
            "individuallyDeletedMessages": _deleted_ranges(ranges),
            "totalNonContiguousDeletedMessagesRange": len(ranges),
            "numberOfEntriesSinceFirstNotAckedMessage": unacked_span,
            "durable": sub.durable,
        }
    for remote, cursor in topic.replication_cursors.items():
        mark_delete, read = cursor.mark_delete_position, cursor.read_position
        cursors[cursor_name(remote)] = {
            "markDeletePosition": str(mark_delete),
            "readPosition": str(read),
            "individuallyDeletedMessages": _deleted_ranges(cursor.individually_deleted_ranges()),
            "durable": True,
        }
    compaction = topic.compaction
    if (compactor := compaction.cursor) is not None:  # Pulsar's compactor's subscription
        mark_delete, read = compactor.mark_delete_position, compactor.read_position
        view = compaction.view
        cursors[COMPACTION_SUBSCRIPTION] = {
            "markDeletePosition": str(mark_delete),
            "readPosition": str(read),
            "individuallyDeletedMessages": _deleted_ranges(compactor.individually_deleted_ranges()),
            "durable": True,
            "properties": {COMPACTED_TOPIC_LEDGER: view.ledger.ledger_id} if view is not None else {},
        }
    created = datetime.fromtimestamp(current.created_at, tz=UTC)
    return {
        "numberOfEntries": sum(info.entries for info in ledgers),
        "totalSize": sum(info.size_bytes for info in ledgers),
        "currentLedgerEntries": current.entries,
        "currentLedgerSize": current.size_bytes,
        "lastLedgerCreatedTimestamp": created.isoformat(timespec="milliseconds"),
        "lastConfirmedEntry": str(ml.last_confirmed),
        "state": "LedgerOpened",
        "ledgers": [
            {
                "ledgerId": info.ledger_id,
                "entries": info.entries,
                "size": info.size_bytes,
                "offloaded": info.offloaded,
                "underReplicated": False,
                **({"timestamp": int(info.closed_at * 1000)} if info.closed_at else {}),
                # Magnetar's own: where an offloaded ledger's object is, and whether the local copy is left
                **(
                    {"offloadState": info.offload.state, "offloadKey": info.offload.key, "local": info.local}
                    if info.offload is not None
                    else {}
                ),
            }
            for info in ledgers
        ],
        "cursors": cursors,
        "compactedLedger": _compacted_ledger(topic),
        # Magnetar's own: entries passed over because their records are damaged, and tails
        # recovery cut off, since the topic was loaded (docs/storage.md, "Damaged files")
        "damagedEntries": ml.damage.damaged_entries,
        "damage": ml.damage.stats(),
    }


def _compacted_ledger(topic: PersistentTopic) -> dict:
    """Pulsar's ``compactedLedger`` of internal stats: the compacted ledger's id, entries and
    bytes; -1 for each before the first compaction."""
    view = topic.compaction.view
    if view is None:
        return {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False, "underReplicated": False}
    ledger = view.ledger
    return {
        "ledgerId": ledger.ledger_id,
        "entries": ledger.entries,
        "size": ledger.size_bytes,
        "offloaded": False,
        "underReplicated": False,
    }


#: A broadcast subscription's consumer counts (``_listed``), summed over partitions.
_BROADCAST_COUNTS = ("consumersCount", "consumersListed", "detachedCount")


def _average_size(stats: dict) -> float:
    return stats["msgThroughputIn"] / stats["msgRateIn"] if stats["msgRateIn"] else 0.0


def _sum_into(total: dict, part: dict, fields: tuple[str, ...]) -> None:
    for field in fields:
        total[field] = total.get(field, 0) + part[field]


def partitioned_stats(partitions: dict[str, dict], per_partition: bool = True) -> dict:
    """One partitioned topic's stats from its partitions' ``topic_stats``, as Pulsar sums them:
    rates, counters and storage added up; publishers by name and subscriptions by name merged
    (backlogs added, consumers listed together; a broadcast subscription's consumer counts
    added and each partition's page of consumers listed in ``consumersPages``)."""
    total: dict = {field: 0 for field in (*_IN, *_OUT, "storageSize")}
    publishers: dict[str, dict] = {}
    subscriptions: dict[str, dict] = {}
    for stats in partitions.values():
        _sum_into(total, stats, (*_IN, *_OUT, "storageSize"))
        for publisher in stats["publishers"]:
            merged = publishers.setdefault(
                publisher["producerName"], {"producerName": publisher["producerName"]}
            )
            _sum_into(merged, publisher, _IN)
        for name, sub in stats["subscriptions"].items():
            merged = subscriptions.setdefault(
                name, {"durable": sub["durable"], "type": sub["type"], "consumers": []}
            )
            _sum_into(merged, sub, (*_OUT, "msgBacklog"))
            merged["consumers"].extend(sub["consumers"])
            if "consumersCount" in sub:  # broadcast: each partition lists a few, pages the rest
                _sum_into(merged, sub, _BROADCAST_COUNTS)
                merged.setdefault("consumersPages", []).append(sub["consumersPage"])
    for publisher in publishers.values():
        publisher["averageMsgSize"] = _average_size(publisher)
    total["averageMsgSize"] = _average_size(total)
    total["publishers"] = list(publishers.values())
    total["subscriptions"] = subscriptions
    total["metadata"] = {"partitions": len(partitions)}
    total["partitions"] = dict(partitions) if per_partition else {}
    return total


async def _stats_here(
    service: BrokerService, request: web.Request, topic: PersistentTopic | NonPersistentTopic
) -> dict:
    """``topic_stats`` of a topic loaded here; of a spread one, with what every worker serves of
    its broadcast subscriptions (spread_stats.py)."""
    if not spread_stats.merges(service, topic.name):
        return topic_stats(topic, service.offloads)
    stats = topic_stats(topic, service.offloads, spread=True)
    for name, sub in topic.subscriptions.items():
        if (slowest := spread_stats.slowest_backlog(sub)) is not None:
            stats["subscriptions"][name]["slowestBacklog"] = slowest
    parts = await spread_stats.followed_parts(service, request, topic.name)
    return spread_stats.merge(stats, service.namespace_service.broker_id, parts)


def followed_part(service: BrokerService, topic: TopicName) -> dict:
    """This worker's part of a spread topic's stats: its follower's subscriptions, each with the
    consumers it serves and the largest backlog among them (spread_stats.py); none without one."""
    follower = service.spread.followers.get(str(topic))
    subscriptions = {}
    for name, sub in (follower.subscriptions if follower is not None else {}).items():
        part = subscription_stats(sub)
        part["slowestBacklog"] = spread_stats.slowest_backlog(sub)
        subscriptions[name] = part
    return {"worker": service.namespace_service.broker_id, "subscriptions": subscriptions}


def add_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def followed(request: web.Request) -> web.Response:
        topic = topic_of(request, "persistent")
        if (name := request.query.get("subscription")) is None:
            return web.json_response(followed_part(service, topic))
        follower = service.spread.followers.get(str(topic))
        sub = follower.subscriptions.get(name) if follower is not None else None
        if sub is None:  # nothing of it served here
            return web.json_response({"total": 0, "consumers": []})
        offset, limit = int(request.query.get("offset", "0")), int(request.query.get("limit", "1"))
        return web.json_response(consumer_page(sub, offset, limit, asyncio.get_running_loop().time()))

    app.router.add_get(
        f"/admin/v2/persistent/{{tenant}}/{{namespace}}/{{topic}}{spread_stats.FOLLOWED}", followed
    )
    for domain in ("persistent", "non-persistent"):
        base = f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}"

        @translate_errors
        async def stats(request: web.Request, domain: str = domain) -> web.Response:
            topic = single_topic(service, request, domain, "ask for its partitioned-stats")
            return web.json_response(await _stats_here(service, request, topic))

        @translate_errors
        async def partitioned(request: web.Request, domain: str = domain) -> web.Response:
            names = partitions_of(service, request, domain)
            answers = await each_partition(
                service,
                request,
                names,
                lambda partition: _stats_here(service, request, service.get_topic(partition, create=False)),
                suffix="/stats",
            )
            partitions = {str(name): stats for name, stats in zip(names, answers, strict=True)}
            per_partition = request.query.get("perPartition", "true").lower() != "false"
            return web.json_response(partitioned_stats(partitions, per_partition))

        app.router.add_get(f"{base}/stats", stats)
        app.router.add_get(f"{base}/partitioned-stats", partitioned)

    @translate_errors
    async def internal(request: web.Request) -> web.Response:
        return web.json_response(
            internal_stats(persistent(single_topic(service, request, "persistent", "ask each partition")))
        )

    app.router.add_get("/admin/v2/persistent/{tenant}/{namespace}/{topic}/internalStats", internal)
