"""Sends to another worker's topic that its owner dropped (resends.py), without a network: they go
again together, in the order they were sent, through one producer at the owner (or into the topic
here), and the connection's later PUBLISHes to the topic wait until they did; a later PUBLISH sent
first would take a higher sequence id at the topic, and deduplication would then answer the
dropped ones as duplicates without storing them (PUBACKed, lost: CI's
test_publishes_in_flight_while_the_bundle_moves_are_all_stored_once)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from magnetar.broker.mqtt import inbound, resends
from magnetar.broker.mqtt.remote import RemoteProducer
from magnetar.broker.mqtt.resends import Dropped
from magnetar.broker.namespace_service import ServiceUnitNotReady
from magnetar.protocol.mqtt import MQTT_3_1_1, Publish
from magnetar.protocol.topic_name import TopicName

NAME = TopicName.parse("persistent://public/default/inflight")
OWNER = "worker-1"


@dataclass
class Producer:
    number: int
    closed: bool = False


@dataclass
class Service:
    """Who serves the topic (``remote.owner_elsewhere`` asks), and its opening here."""

    shares_bundles: bool = True
    owner: str | None = OWNER
    opening: asyncio.Future | None = None

    def serves(self, name: TopicName) -> bool:
        return self.owner is None

    def owner_of(self, name: TopicName) -> str | None:
        return self.owner

    def preparing(self, name: TopicName) -> asyncio.Future | None:
        return self.opening


@dataclass
class Links:
    """The connection's producers at the owners: each ask makes the next one (or fails, or,
    with ``answer``, is answered when the test says)."""

    held: dict = field(default_factory=dict)
    producers: dict = field(default_factory=dict)
    made: list[Producer] = field(default_factory=list)
    failures: int = 0
    answer: asyncio.Future | None = None
    #: Set once a producer is asked for.
    asked: asyncio.Event = field(default_factory=asyncio.Event)

    def producer(self, name: TopicName, owner: str) -> asyncio.Future:
        self.asked.set()
        if self.answer is not None:
            answer, self.answer = self.answer, None
            return answer
        future = asyncio.get_running_loop().create_future()
        if self.failures:
            self.failures -= 1
            future.set_exception(ConnectionError("ServiceNotReady: the bundle is being unloaded"))
        else:
            self.made.append(Producer(len(self.made) + 1))
            future.set_result(self.made[-1])
        return future


@dataclass
class Connection:
    service: Service = field(default_factory=Service)
    links: Links = field(default_factory=Links)
    closed: bool = False
    remote: str = "127.0.0.1:5555"
    flushes: int = 0
    #: What the connection waits for before its next packet (``MqttConnection.wait_for``).
    waits: list = field(default_factory=list)
    version: int = MQTT_3_1_1
    session: object = field(default_factory=object)
    #: Why it was closed (a 3.1.1 client's PUBLISH refused).
    closes: list = field(default_factory=list)

    def close_with(self, reason, message=None) -> None:
        self.closes.append(message)

    def flush_publishes(self) -> None:
        self.flushes += 1

    def wait_for(self, future, then) -> None:
        self.waits.append((future, then))


@dataclass
class Record:
    """What became of each dropped send, in the order it happened."""

    cnx: Connection
    events: list = field(default_factory=list)

    def dropped(self, number: int) -> Dropped:
        def to_owner(producer) -> None:
            self.events.append(("owner", number, producer.number, self.gate_open()))

        def here(opened) -> None:
            self.events.append(("here", number, opened is not None and opened.done(), self.gate_open()))

        def fail(exc) -> None:
            self.events.append(("failed", number, str(exc), self.gate_open()))

        return Dropped(to_owner, here, fail)

    def gate_open(self) -> bool:
        return resends.released(self.cnx, NAME) is None


@pytest.fixture(autouse=True)
def no_delay(monkeypatch):
    monkeypatch.setattr(resends, "DELAY_S", 0.001)


async def held_done(cnx: Connection) -> None:
    """Until nothing is held for the topic."""
    while (gate := resends.released(cnx, NAME)) is not None:
        await gate


def test_dropped_sends_go_again_in_order_through_one_producer_before_the_gate_opens():
    async def run() -> None:
        cnx = Connection()
        record = Record(cnx)
        for number in (1, 2, 3):  # the pending sends of the closed producer, failed in order
            resends.hold(cnx, NAME, record.dropped(number))
        gate = resends.released(cnx, NAME)
        assert gate is not None and not gate.done()  # later PUBLISHes wait for it
        await gate
        assert record.events == [("owner", n, 1, True) for n in (1, 2, 3)]
        assert resends.released(cnx, NAME) is None and cnx.links.held == {}

    asyncio.run(run())


def test_a_send_dropped_while_the_others_wait_joins_them():
    async def run() -> None:
        cnx = Connection()
        answer = cnx.links.answer = asyncio.get_running_loop().create_future()
        record = Record(cnx)
        resends.hold(cnx, NAME, record.dropped(1))
        await cnx.links.asked.wait()  # the producer at the owner is being made
        resends.hold(cnx, NAME, record.dropped(2))  # routed before the drop, to the closed producer
        answer.set_result(Producer(7))
        await held_done(cnx)
        assert record.events == [("owner", 1, 7, True), ("owner", 2, 7, True)]

    asyncio.run(run())


def test_a_send_dropped_again_is_held_anew_and_the_gate_stays_shut_for_it():
    async def run() -> None:
        cnx = Connection()
        record = Record(cnx)
        again = record.dropped(3)

        def to_owner_then_dropped(producer) -> None:
            record.events.append(("owner", 2, producer.number, record.gate_open()))
            resends.hold(cnx, NAME, again)  # that producer closed too, with it pending

        resends.hold(cnx, NAME, record.dropped(1))
        resends.hold(cnx, NAME, Dropped(to_owner_then_dropped, lambda opened: None, lambda exc: None))
        first = resends.released(cnx, NAME)
        await first
        second = resends.released(cnx, NAME)
        assert second is not None and second is not first and not second.done()
        await second
        assert record.events == [("owner", 1, 1, True), ("owner", 2, 1, True), ("owner", 3, 2, True)]

    asyncio.run(run())


def test_dropped_sends_are_stored_here_in_order_once_the_topic_is_open_when_the_bundle_came_here():
    async def run() -> None:
        loop = asyncio.get_running_loop()
        opening = loop.create_future()
        cnx = Connection(service=Service(owner=None, opening=opening))
        record = Record(cnx)
        for number in (1, 2):
            resends.hold(cnx, NAME, record.dropped(number))
        loop.call_later(0.05, opening.set_result, None)
        await held_done(cnx)
        assert record.events == [("here", 1, True, True), ("here", 2, True, True)]
        assert cnx.flushes == 1 and cnx.links.made == []

    asyncio.run(run())


def test_dropped_sends_go_to_the_owner_when_the_bundle_left_again_while_the_topic_was_opened_here():
    async def run() -> None:
        class LeavesAgain(Service):
            def preparing(self, name: TopicName) -> asyncio.Future | None:
                opening, self.opening, self.owner = self.opening, None, OWNER  # the other's next
                return opening

        cnx = Connection(service=LeavesAgain(owner=None, opening=not_served_here()))
        record = Record(cnx)
        resends.hold(cnx, NAME, record.dropped(1))
        await held_done(cnx)
        assert cnx.service.opening is None  # it was opened here first
        assert record.events == [("owner", 1, 1, True)]

    asyncio.run(run())


def test_dropped_sends_fail_in_order_when_no_owner_can_be_reached():
    async def run() -> None:
        cnx = Connection()
        cnx.links.failures = resends.TRIES
        record = Record(cnx)
        for number in (1, 2):
            resends.hold(cnx, NAME, record.dropped(number))
        await held_done(cnx)
        assert [(event, number) for event, number, *_ in record.events] == [("failed", 1), ("failed", 2)]
        assert "ServiceNotReady: the bundle is being unloaded" in record.events[0][2]

    asyncio.run(run())


def test_dropped_sends_fail_when_the_connection_closes():
    async def run() -> None:
        cnx = Connection()
        record = Record(cnx)
        resends.hold(cnx, NAME, record.dropped(1))
        cnx.closed = True
        await held_done(cnx)
        assert record.events == [("failed", 1, "the connection closed", True)]

    asyncio.run(run())


def test_a_publish_to_a_topic_with_held_sends_waits_for_them_before_it_is_routed():
    """The regression: the PUBLISH behind the dropped sends is routed (a producer made, its
    sequence id taken) only once they went again."""

    async def run() -> None:
        cnx = Connection()
        record = Record(cnx)
        resends.hold(cnx, NAME, record.dropped(1))
        packet = Publish("inflight", b"m-2", 1, packet_id=2)
        inbound._route(cnx, packet, "inflight", NAME, 0)
        assert cnx.links.made == []  # no producer asked for: it waits
        [(gate, then)] = cnx.waits
        assert gate is resends.released(cnx, NAME)
        await gate
        assert record.events == [("owner", 1, 1, True)]
        then(gate)
        assert len(cnx.waits) == 2 and cnx.waits[1][0].result() is cnx.links.made[-1]

    asyncio.run(run())


def not_served_here() -> asyncio.Future:
    """A topic's opening here, refused: its bundle left this worker meanwhile (an unload)."""
    opened = asyncio.get_running_loop().create_future()
    opened.set_exception(ServiceUnitNotReady("Namespace bundle for topic (...) not served by this instance"))
    return opened


def test_a_publish_whose_bundle_left_while_its_topic_was_opened_here_is_routed_again():
    """A PUBLISH to a topic of the MQTT worker while its bundle is unloaded: routed again to its
    next owner (a 3.1.1 client has no negative PUBACK: refused, it lost its connection)."""

    async def run() -> None:
        cnx = Connection()
        packet = Publish("inflight", b"m-1", 1, packet_id=1)
        inbound._publish_to(cnx, packet, "inflight", NAME, not_served_here(), 0)
        [(pause, then)] = cnx.waits  # the packets behind wait
        await pause
        then(pause)  # the other worker owns it now: through a session to it
        assert len(cnx.waits) == 2 and cnx.waits[1][0].result() is cnx.links.made[-1]
        assert cnx.closes == []

    asyncio.run(run())


def test_a_publish_whose_bundle_is_not_served_here_after_every_try_is_refused():
    async def run() -> None:
        cnx = Connection()
        packet = Publish("inflight", b"m-1", 1, packet_id=1)
        inbound._publish_to(cnx, packet, "inflight", NAME, not_served_here(), resends.TRIES)
        assert cnx.waits == [] and len(cnx.closes) == 1 and "not served" in cnx.closes[0]

    asyncio.run(run())


@dataclass
class Session:
    """A session to the old owner: what the producer sends there."""

    closed: bool = False
    sent: list = field(default_factory=list)

    def send(self, command, payload=None) -> None:
        self.sent.append(command)

    def remove_producer(self, producer_id: int) -> None:
        pass


def test_a_publish_stored_here_waits_for_the_sends_still_unreceipted_at_the_old_owner():
    """The bundle came here before the old owner closed the connection's producer there: a PUBLISH
    routed here meanwhile waits until those sends are answered or dropped (and then held, to be
    stored here first); stored before them, it took a higher sequence id and they were lost."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        opening = loop.create_future()
        cnx = Connection(service=Service(owner=None, opening=opening))
        producer = RemoteProducer(None, Session(), 1, str(NAME), "mqtt-car")
        answers = []
        producer.send(368, b"m-368", lambda position, exc: answers.append(exc))
        made = loop.create_future()
        made.set_result(producer)
        cnx.links.producers[str(NAME)] = made
        inbound._route(cnx, Publish("inflight", b"m-369", 1, packet_id=370), "inflight", NAME, 0)
        [(unreceipted, then)] = cnx.waits
        assert not unreceipted.done() and opening not in [wait for wait, _ in cnx.waits]
        producer.on_closed("the broker closed the producer")  # its bundle unloaded
        assert unreceipted.done() and len(answers) == 1  # dropped: held (resends.py)
        then(unreceipted)
        assert cnx.waits[1][0] is opening  # then stored here

    asyncio.run(run())


def test_without_workers_nothing_is_held():
    async def run() -> None:
        assert resends.released(Connection(service=Service(shares_bundles=False)), NAME) is None

    asyncio.run(run())
