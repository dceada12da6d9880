"""Our client's options against the official client's: unknown names are refused with a suggestion,
and every official name is either used, accepted as changing nothing, or refused by name.

The official names come from the installed ``pulsar-client``'s signatures, so a new option there
fails these tests until client/options.py says what we do with it. None of these tests needs a
broker: options are checked before anything is sent (the client's service URL is never dialled).
"""

from __future__ import annotations

import dataclasses
import inspect

import pulsar
import pytest

from magnetar.client import Client, MessageId, UnsupportedOption
from magnetar.client.client import Client as AsyncClient
from magnetar.client.consumer_config import ConsumerConfig
from magnetar.client.options import (
    ENTRY_POINTS,
    IGNORED,
    REFUSED,
    SUPPORTED,
    check_options,
    unexpected_option_message,
)
from magnetar.client.producer_config import ProducerConfig
from magnetar.client.reader import READER_ARGUMENTS

NOWHERE = "pulsar://127.0.0.1:9"  # never dialled: every call below fails before a lookup

OFFICIAL = {
    "Client": pulsar.Client.__init__,
    "create_producer": pulsar.Client.create_producer,
    "subscribe": pulsar.Client.subscribe,
    "create_reader": pulsar.Client.create_reader,
    "create_table_view": pulsar.Client.create_table_view,
}
#: Positional arguments, not options.
POSITIONAL = {"self", "service_url", "topic", "subscription_name", "start_message_id"}

#: Where each entry point's supported options are used: the asyncio client's parameters, the
#: config dataclasses' fields, the Reader's arguments, and the few read from the options by name.
USED = {
    "Client": set(inspect.signature(AsyncClient.__init__).parameters),
    "create_producer": {f.name for f in dataclasses.fields(ProducerConfig)} | {"message_router"},
    "subscribe": {f.name for f in dataclasses.fields(ConsumerConfig)}
    | {"message_listener", "pattern_auto_discovery_period"},
    "create_reader": set(READER_ARGUMENTS) | {"reader_listener"},
    "create_table_view": set(),  # its one option, schema, takes bytes only
}

#: Accepted and ignored: each changes nothing a user can observe here (see the tables' reasons).
#: Adding to this list is a decision, hence spelt out.
EXPECTED_IGNORED = {
    ("Client", "io_threads"),
    ("Client", "concurrent_lookup_requests"),
    ("Client", "stats_interval_in_seconds"),
    ("Client", "logger"),
    ("subscribe", "broker_consumer_stats_cache_time_ms"),
}


def official_options(entry: str) -> list[str]:
    return [name for name in inspect.signature(OFFICIAL[entry]).parameters if name not in POSITIONAL]


def call(client: Client, entry: str, **options):
    """Call ``entry`` of our blocking client as a user would."""
    if entry == "create_producer":
        return client.create_producer("persistent://public/default/t", **options)
    if entry == "subscribe":
        return client.subscribe("persistent://public/default/t", "sub", **options)
    if entry == "create_table_view":
        return client.create_table_view("persistent://public/default/t", **options)
    return client.create_reader("persistent://public/default/t", MessageId.earliest, **options)


class _Reading(pulsar.schema.Record):
    value = pulsar.schema.Integer()


@pytest.fixture
def offline_client():
    client = Client(NOWHERE)
    yield client
    client.close()


# --- unknown names --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "typo", "meant"),
    [
        ("create_producer", "batching_enbled", "batching_enabled"),
        ("subscribe", "recevier_queue_size", "receiver_queue_size"),
        ("create_reader", "reader_nmae", "reader_name"),
    ],
)
def test_a_misspelt_option_is_a_type_error_naming_the_nearest(offline_client, entry, typo, meant):
    with pytest.raises(TypeError) as caught:
        call(offline_client, entry, **{typo: 1})
    assert str(caught.value) == f"{entry}() got an unexpected option {typo!r} (did you mean {meant!r}?)"


def test_the_client_constructor_refuses_a_misspelt_option():
    with pytest.raises(
        TypeError,
        match=r"Client\(\) got an unexpected option 'operation_timeout_second' "
        r"\(did you mean 'operation_timeout_seconds'\?\)",
    ):
        Client(NOWHERE, operation_timeout_second=5)


def test_an_option_like_no_known_one_gets_no_suggestion():
    message = unexpected_option_message("subscribe", "zzz", ENTRY_POINTS["subscribe"])
    assert message == "subscribe() got an unexpected option 'zzz'"


def test_an_option_of_another_entry_point_is_unknown_here(offline_client):
    # receiver_queue_size is a consumer's: a producer given it must not take it silently.
    with pytest.raises(TypeError, match=r"create_producer.*'receiver_queue_size'"):
        call(offline_client, "create_producer", receiver_queue_size=5)


def test_the_asyncio_client_refuses_the_same_names():
    import asyncio

    async def main() -> None:
        async with AsyncClient(NOWHERE) as client:
            with pytest.raises(TypeError, match="did you mean 'receiver_queue_size'"):
                await client.subscribe("t", "sub", recevier_queue_size=5)
            with pytest.raises(UnsupportedOption, match="dead_letter_policy"):
                await client.subscribe("t", "sub", dead_letter_policy=object())

    asyncio.run(main())


# --- the official client's names ------------------------------------------------------------------
@pytest.mark.parametrize("entry", sorted(OFFICIAL))
def test_every_official_option_has_a_status(entry):
    missing = [name for name in official_options(entry) if name not in ENTRY_POINTS[entry]]
    assert not missing, f"{entry}: official options client/options.py does not list: {missing}"
    for name in official_options(entry):
        assert ENTRY_POINTS[entry][name].official, f"{entry}({name}) is official"


@pytest.mark.parametrize("entry", sorted(OFFICIAL))
def test_every_supported_option_is_used(entry):
    table = ENTRY_POINTS[entry]
    unused = [name for name, opt in table.items() if opt.status == SUPPORTED and name not in USED[entry]]
    assert not unused, f"{entry}: options said supported that nothing reads: {unused}"


def test_every_option_of_ours_is_in_the_tables():
    # The internal ConsumerConfig fields a reader sets are not options of subscribe.
    internal = {"self", "service_url", "options", "subscription_name", "durable", "start_message_id"}
    for entry in ENTRY_POINTS:
        missing = USED[entry] - internal - set(ENTRY_POINTS[entry])
        assert not missing, f"{entry}: options we take that client/options.py does not list: {missing}"


def test_the_options_that_change_nothing_are_the_expected_ones():
    ignored = {
        (entry, name)
        for entry, table in ENTRY_POINTS.items()
        for name, opt in table.items()
        if opt.status == IGNORED
    }
    assert ignored == EXPECTED_IGNORED


@pytest.mark.parametrize(
    ("entry", "name"),
    [
        (entry, name)
        for entry in sorted(OFFICIAL)
        for name in official_options(entry)
        if ENTRY_POINTS[entry][name].status == REFUSED
    ],
)
def test_a_refused_official_option_is_refused_by_name(offline_client, entry, name):
    unusable = object()  # no refused option accepts this value
    with pytest.raises(UnsupportedOption) as caught:
        if entry == "Client":
            Client(NOWHERE, **{name: unusable}).close()
        else:
            call(offline_client, entry, **{name: unusable})
    assert f"option {name}=" in str(caught.value)
    assert "not supported by Magnetar's client" in str(caught.value)
    assert ENTRY_POINTS[entry][name].why in str(caught.value)


#: Limits across a partitioned topic's partitions, which we do not apply: refused even at the
#: official default, since a user who writes the limit down expects it to hold.
REFUSED_AT_DEFAULT = {
    "max_pending_messages_across_partitions",
    "max_total_receiver_queue_size_across_partitions",
}


def test_every_official_option_at_its_default_is_accepted():
    # Code that spells out the official defaults (or passes None) runs unchanged.
    for entry in OFFICIAL:
        for name, param in inspect.signature(OFFICIAL[entry]).parameters.items():
            if name in POSITIONAL:
                continue
            check_options(entry, {name: None})
            if name in REFUSED_AT_DEFAULT:
                with pytest.raises(UnsupportedOption, match=name):
                    check_options(entry, {name: param.default})
            else:
                check_options(entry, {name: param.default})


@pytest.mark.parametrize(
    ("entry", "options"),
    [
        ("create_producer", {"schema": pulsar.schema.StringSchema()}),
        ("create_producer", {"message_routing_mode": pulsar.PartitionsRoutingMode.UseSinglePartition}),
        ("create_producer", {"batching_type": pulsar.BatchingType.KeyBased}),
        ("create_producer", {"lazy_start_partitioned_producers": True}),
        ("create_producer", {"encryption_key": "key"}),
        ("subscribe", {"schema": pulsar.schema.JsonSchema(_Reading)}),
        ("subscribe", {"dead_letter_policy": pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=3)}),
        ("subscribe", {"regex_subscription_mode": pulsar.RegexSubscriptionMode.AllTopics}),
        ("subscribe", {"crypto_failure_action": pulsar.ConsumerCryptoFailureAction.DISCARD}),
        ("Client", {"message_listener_threads": 4}),
    ],
)
def test_what_we_do_not_implement_is_refused_with_its_official_value(entry, options):
    with pytest.raises(UnsupportedOption, match=next(iter(options))):
        check_options(entry, options)


def test_values_asking_for_what_we_do_are_accepted():
    check_options("create_producer", {"schema": pulsar.schema.BytesSchema()})
    check_options(
        "create_producer", {"message_routing_mode": pulsar.PartitionsRoutingMode.RoundRobinDistribution}
    )
    check_options("subscribe", {"regex_subscription_mode": pulsar.RegexSubscriptionMode.PersistentOnly})
    check_options("create_reader", {"crypto_failure_action": pulsar.ConsumerCryptoFailureAction.FAIL})
    check_options("Client", {"message_listener_threads": 1, "io_threads": 8})


def test_docs_list_every_official_option_with_its_status():
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "client.md").read_text()
    for entry in OFFICIAL:
        section = docs.split(f"**`{entry}`**", 1)[1].split("**`", 1)[0]
        for name in official_options(entry):
            status = ENTRY_POINTS[entry][name].status
            assert f"| `{name}` | {status} |" in section, f"docs/client.md: {entry}({name}) as {status}"
