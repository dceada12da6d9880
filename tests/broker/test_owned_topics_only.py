"""With workers, a broker opens only the topics of the bundles it owns: another worker may have
the same managed ledger open, and two writers on one ledger would corrupt it. Every path that
loads a topic (a client's command, an admin path, geo-replication's start) meets the same refusal,
ServiceNotReady with Pulsar's words, and no file of the topic is touched."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker import startup
from magnetar.broker.config import BrokerConfig
from magnetar.broker.namespace_service import ServiceUnitNotReady
from magnetar.broker.ownership import BrokerInfo
from magnetar.broker.ownership_sqlite import SqliteOwnership
from magnetar.broker.service import BrokerService
from magnetar.protocol.topic_name import TopicName

DOMAINS = ("persistent", "non-persistent")
OTHERS = "persistent://public/default/t-0"
MINE = "persistent://public/default/owned-here"


def test_a_topic_of_a_bundle_another_worker_owns_is_never_opened(tmp_path):
    async def scenario() -> None:
        config = BrokerConfig(data_dir=tmp_path / "data", host="127.0.0.1", port=0, fsync_policy="never")
        ownership = SqliteOwnership.in_data_dir(tmp_path)
        service = BrokerService(startup.prepare(config), ownership)
        await service.start(asyncio.Protocol)
        try:
            ownership.register(BrokerInfo("other", "pulsar://127.0.0.1:1"))
            ns = service.namespace_service
            mine = ns.bundle_of(TopicName.parse(MINE))
            for bundle in ns.bundles("public/default").bundles:  # every other bundle is the other's
                ownership.assign(str(bundle), ns.broker_id if bundle == mine else "other")
            others = [f"{domain}://public/default/t-{i}" for domain in DOMAINS for i in range(20)]
            others = [n for n in others if ns.bundle_of(TopicName.parse(n)) != mine]
            assert OTHERS in others
            for name in others:
                with pytest.raises(ServiceUnitNotReady, match="not served by this instance"):
                    service.get_topic(TopicName.parse(name))
            opening = service.preparing(TopicName.parse(OTHERS))
            assert opening is not None
            with pytest.raises(ServiceUnitNotReady):
                await opening
            assert not service.storage.has_managed_ledger(OTHERS) and OTHERS not in service.topics
            assert service.get_topic(TopicName.parse(MINE)).name == TopicName.parse(MINE)
        finally:
            await service.stop()
            ownership.close()

    asyncio.run(scenario())
