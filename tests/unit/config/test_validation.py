"""Every mistake is refused with the element path, the bad value and what was expected."""

from __future__ import annotations

import pytest

from amps.config import ConfigErrors, load_config
from amps.errors import ConfigError, FilterSyntaxError

from .helpers import assert_error, document, errors_of, queue_document

Q = "AMPSConfig/SOW/Queue[1]"
JSON = "<MessageType>json</MessageType>"


def test_missing_instance_name() -> None:
    assert_error(document("", name=""), "AMPSConfig/Name", "instance Name")


def test_unknown_elements_are_errors_not_ignored() -> None:
    error = assert_error(document("<TransactionLogs/>"), "AMPSConfig/TransactionLogs", "one of")
    assert "TransactionLog" in error.expected
    assert_error(
        queue_document(f"<Name>orders</Name>{JSON}<LeasePeriood>1s</LeasePeriood>"),
        f"{Q}/LeasePeriood",
        "LeasePeriod",
    )


def test_duplicate_single_elements() -> None:
    assert_error(document("<Name>again</Name>"), "AMPSConfig/Name", "at most one Name")


def test_attributes_and_stray_text_are_errors() -> None:
    assert_error(document('<Admin enabled="yes"/>'), "AMPSConfig/Admin", "no XML attributes")
    assert_error(document("<SOW>oops</SOW>"), "AMPSConfig/SOW", "child elements only")
    assert_error(
        document("<Admin><InetAddr><Port>1</Port></InetAddr></Admin>"),
        "AMPSConfig/Admin/InetAddr",
        "not child elements",
    )


def test_empty_values_are_errors() -> None:
    assert_error(
        document("<Admin><InetAddr> </InetAddr></Admin>"), "AMPSConfig/Admin/InetAddr", "non-empty"
    )


@pytest.mark.parametrize("addr", ["70000", "host:", "a b:1", "[::1]", "[zz]:1", ":", "-1"])
def test_bad_admin_addresses(addr: str) -> None:
    assert_error(
        document(f"<Admin><InetAddr>{addr}</InetAddr></Admin>"), "AMPSConfig/Admin/InetAddr", "port"
    )


def test_admin_interval_minimum() -> None:
    assert_error(
        document("<Admin><Interval>500ms</Interval></Admin>"),
        "AMPSConfig/Admin/Interval",
        "from 1s",
    )


def transport(body: str) -> str:
    return document(f"<Transports><Transport>{body}</Transport></Transports>")


def test_transport_errors() -> None:
    assert_error(
        transport("<Name>t</Name><Type>tcp</Type><InetAddr>1</InetAddr>"),
        "AMPSConfig/Transports/Transport[1]/Type",
        "grpc, amps-replication",
    )
    assert_error(
        transport("<Name>t</Name><Type>grpc</Type>"),
        "AMPSConfig/Transports/Transport[1]/InetAddr",
        "port",
    )
    assert_error(
        transport("<Type>grpc</Type><InetAddr>1</InetAddr>"),
        "AMPSConfig/Transports/Transport[1]/Name",
        "transport name",
    )
    assert_error(
        transport(
            "<Name>t</Name><Type>grpc</Type><InetAddr>1</InetAddr>"
            "<MaxMessageSize>0</MaxMessageSize>"
        ),
        "AMPSConfig/Transports/Transport[1]/MaxMessageSize",
        "from 1 byte",
    )


def test_duplicate_transport_names_and_second_replication_listener() -> None:
    one = "<Transport><Name>r</Name><Type>amps-replication</Type><InetAddr>1</InetAddr></Transport>"
    errors = errors_of(document(f"<Transports>{one}{one}</Transports>"))
    paths = {(e.path, e.expected.split(" ")[0]) for e in errors}
    assert ("AMPSConfig/Transports/Transport[2]/Name", "a") in paths
    assert ("AMPSConfig/Transports/Transport[2]/Type", "at") in paths


def log(body: str) -> str:
    return document("", log=f"<TransactionLog>{body}</TransactionLog>")


def test_transaction_log_errors() -> None:
    assert_error(log(""), "AMPSConfig/TransactionLog/JournalDirectory", "journal directory")
    d = "<JournalDirectory>j</JournalDirectory>"
    assert_error(
        log(f"{d}<JournalSize>1KB</JournalSize>"),
        "AMPSConfig/TransactionLog/JournalSize",
        "from 64KB",
    )
    assert_error(
        log(f"{d}<MinJournalSize>big</MinJournalSize>"),
        "AMPSConfig/TransactionLog/MinJournalSize",
        "size in bytes",
    )
    assert_error(
        log(f"{d}<FlushInterval>2s</FlushInterval>"),
        "AMPSConfig/TransactionLog/FlushInterval",
        "to 1000ms",
    )
    assert_error(
        log(f"{d}<FlushInterval>1500ns</FlushInterval>"),
        "AMPSConfig/TransactionLog/FlushInterval",
        "whole number of microseconds",
    )
    assert_error(
        log(f"{d}<PreallocatedJournalFiles>0</PreallocatedJournalFiles>"),
        "AMPSConfig/TransactionLog/PreallocatedJournalFiles",
        "at least 1",
    )


def test_transaction_log_topic_errors() -> None:
    d = "<JournalDirectory>j</JournalDirectory>"
    assert_error(
        log(f"{d}<Topic><Name>^(orders</Name>{JSON}</Topic>"),
        "AMPSConfig/TransactionLog/Topic[1]/Name",
        "valid regular expression",
    )
    assert_error(
        log(f"{d}<Topic><Name>a</Name><MessageType>xml</MessageType></Topic>"),
        "AMPSConfig/TransactionLog/Topic[1]/MessageType",
        "json, binary",
    )
    assert_error(
        log(f"{d}<Topic><Name>a</Name></Topic>"),
        "AMPSConfig/TransactionLog/Topic[1]/MessageType",
        "json or binary",
    )
    assert_error(
        log(f"{d}<Topic><Name>a</Name>{JSON}</Topic><Topic><Name>a</Name>{JSON}</Topic>"),
        "AMPSConfig/TransactionLog/Topic[2]/Name",
        "not already listed",
    )


def test_the_path_names_the_nth_queue() -> None:
    good = f"<Queue><Name>orders</Name>{JSON}</Queue>"
    bad = f"<Queue><Name>ORDERS</Name>{JSON}<LeasePeriod>soon</LeasePeriod></Queue>"
    error = assert_error(
        document(f"<SOW>{good}{bad}</SOW>"),
        "AMPSConfig/SOW/Queue[2]/LeasePeriod",
        "duration with a unit",
    )
    assert error.value == "soon"
    assert str(error) == (
        "AMPSConfig/SOW/Queue[2]/LeasePeriod: 'soon': "
        "expected a duration with a unit (ns, us, ms, s, m, h, d, w)"
    )


@pytest.mark.parametrize(
    ("element", "value", "expected"),
    [
        ("LeasePeriod", "0s", "from 1ms"),
        ("Expiration", "1500us", "whole number of milliseconds"),
        ("Semantics", "exactly-once", "at-least-once, at-most-once"),
        ("ExpirationModel", "never", "default, queue, latest, earliest"),
        ("MaxBacklog", "0", "at least 1"),
        ("MaxPerSubscriptionBacklog", "0", "at least 1"),
        ("MaxCancels", "-1", "whole number"),
        ("MaxDeliveries", "x", "whole number"),
        ("FairnessModel", "random", "fast, round-robin, proportional"),
        ("Leasing", "loose", "strict, sublet"),
        ("TargetQueueDepth", "0", "at least 1"),
        ("RecoveryPoint", "yesterday", "epoch, now, creation"),
        ("FileBackedMetadata", "maybe", "enabled or disabled"),
        ("DeferredAckExpiration", "1", "duration with a unit"),
        ("DefaultTransferLatency", "0ms", "a value from 1ms to 60s"),
        ("DefaultTransferLatency", "61s", "a value from 1ms to 60s"),
        ("DefaultTransferLatency", "250", "duration with a unit"),
        ("TransferRequestTimeout", "0s", "a value from 1ms to 1h"),
        ("TransferRequestTimeout", "1500us", "whole number of milliseconds"),
    ],
)
def test_bad_queue_values(element: str, value: str, expected: str) -> None:
    text = queue_document(f"<Name>orders</Name>{JSON}<{element}>{value}</{element}>")
    assert_error(text, f"{Q}/{element}", expected)


def test_queue_needs_a_literal_name_and_a_message_type() -> None:
    assert_error(queue_document(JSON), f"{Q}/Name", "queue Name (or Topic)")
    assert_error(queue_document(f"<Name>orders.*</Name>{JSON}"), f"{Q}/Name", "literal topic")
    assert_error(queue_document("<Name>orders</Name>"), f"{Q}/MessageType", "json or binary")
    assert_error(
        queue_document(f"<Name>orders</Name><Topic>orders</Topic>{JSON}"),
        f"{Q}/Topic",
        "at most one Name",
    )


def test_regex_underlying_topic_needs_a_default_publish_target() -> None:
    text = queue_document(
        f"<Name>Q</Name>{JSON}<UnderlyingTopic>^ORDERS$|^orders$</UnderlyingTopic>"
    )
    assert_error(text, f"{Q}/DefaultPublishTarget", "required when UnderlyingTopic is a regex")


def test_default_publish_target_must_be_matched_by_the_underlying_topic() -> None:
    text = queue_document(
        f"<Name>Q</Name>{JSON}<UnderlyingTopic>^ORDERS$|^orders$</UnderlyingTopic>"
        "<DefaultPublishTarget>ORDERS_RISK_DIRECT</DefaultPublishTarget>"
    )
    assert_error(text, f"{Q}/DefaultPublishTarget", "matched by the UnderlyingTopic")
    literal = queue_document(
        f"<Name>Q</Name>{JSON}<UnderlyingTopic>orders</UnderlyingTopic>"
        "<DefaultPublishTarget>ORDERS</DefaultPublishTarget>"
    )
    assert_error(literal, f"{Q}/DefaultPublishTarget", "matched by the UnderlyingTopic")
    spaced = queue_document(
        f"<Name>orders</Name>{JSON}<DefaultPublishTarget>o s</DefaultPublishTarget>"
    )
    assert_error(spaced, f"{Q}/DefaultPublishTarget", "without spaces")


def test_target_queue_depth_priority_and_barrier_exclusions() -> None:
    """A4: TargetQueueDepth cannot be combined with Priority or BarrierExpression."""
    base = f"<Name>orders</Name>{JSON}"
    assert_error(
        queue_document(f"{base}<TargetQueueDepth>5</TargetQueueDepth><Priority>/p</Priority>"),
        f"{Q}/TargetQueueDepth",
        "no TargetQueueDepth on a queue with Priority",
    )
    assert_error(
        queue_document(
            f"{base}<TargetQueueDepth>5</TargetQueueDepth><BarrierExpression>/b</BarrierExpression>"
        ),
        f"{Q}/TargetQueueDepth",
        "with a BarrierExpression",
    )
    assert_error(
        queue_document(f"{base}<Priority>/p</Priority><BarrierExpression>/b</BarrierExpression>"),
        f"{Q}/BarrierExpression",
        "no BarrierExpression on a queue with Priority",
    )


def test_at_most_once_allows_only_round_robin() -> None:
    """Q9: at-most-once queues allow only round-robin fairness."""
    base = f"<Name>orders</Name>{JSON}<Semantics>at-most-once</Semantics>"
    assert_error(
        queue_document(f"{base}<FairnessModel>proportional</FairnessModel>"),
        f"{Q}/FairnessModel",
        "round-robin, the only FairnessModel",
    )
    ok = load_config(queue_document(f"{base}<FairnessModel>round-robin</FairnessModel>"))
    assert ok.queues[0].fairness_model == "round-robin"


def test_initial_owner_rules() -> None:
    """R2: InitialOwner is required for GroupLocalQueue and forbidden elsewhere."""
    assert_error(
        queue_document(f"<Name>orders</Name>{JSON}", "GroupLocalQueue"),
        "AMPSConfig/SOW/GroupLocalQueue[1]/InitialOwner",
        "InitialOwner instance name",
    )
    assert_error(
        queue_document(f"<Name>orders</Name>{JSON}<InitialOwner>a</InitialOwner>"),
        f"{Q}/InitialOwner",
        "no InitialOwner on a Queue",
    )
    assert_error(
        queue_document(
            f"<Name>orders</Name>{JSON}<GroupLocalQueueDomain>d</GroupLocalQueueDomain>",
            "LocalQueue",
        ),
        "AMPSConfig/SOW/LocalQueue[1]/GroupLocalQueueDomain",
        "no GroupLocalQueueDomain",
    )


@pytest.mark.parametrize("element", ["DefaultTransferLatency", "TransferRequestTimeout"])
def test_transfer_timing_is_refused_on_a_local_queue(element: str) -> None:
    """R2, R4: a LocalQueue is never replicated, so its transfer timing would mean nothing."""
    error = assert_error(
        queue_document(f"<Name>orders</Name>{JSON}<{element}>1s</{element}>", "LocalQueue"),
        f"AMPSConfig/SOW/LocalQueue[1]/{element}",
        f"no {element} on a LocalQueue",
    )
    assert error.value == "1s"


def test_duplicate_queue_names_across_kinds() -> None:
    text = document(
        f"<SOW><Queue><Name>orders</Name>{JSON}</Queue>"
        f"<LocalQueue><Name>orders</Name>{JSON}</LocalQueue></SOW>"
    )
    assert_error(
        text, "AMPSConfig/SOW/LocalQueue[1]/Name", "not already used by AMPSConfig/SOW/Queue[1]"
    )


def test_underlying_topics_must_be_recorded() -> None:
    """Q1: a queue's underlying topics are recorded in the transaction log."""
    assert_error(
        queue_document(f"<Name>unrecorded</Name>{JSON}"),
        f"{Q}/Name",
        "recorded in the TransactionLog",
    )
    assert_error(
        queue_document(f"<Name>q</Name>{JSON}<UnderlyingTopic>nope</UnderlyingTopic>"),
        f"{Q}/UnderlyingTopic",
        "recorded in the TransactionLog",
    )
    no_log = (
        f"<AMPSConfig><Name>a</Name><SOW><Queue><Name>q</Name>{JSON}</Queue></SOW></AMPSConfig>"
    )
    assert_error(no_log, f"{Q}/Name", "no TransactionLog is configured")


def test_regex_underlying_topic_coverage_rule() -> None:
    """A1: a regex is accepted only when the log provably records everything it matches."""

    def queue(pattern: str, target: str) -> str:
        return queue_document(
            f"<Name>q</Name>{JSON}<UnderlyingTopic>{pattern}</UnderlyingTopic>"
            f"<DefaultPublishTarget>{target}</DefaultPublishTarget>"
        )

    load_config(queue("^ORDERS$|^ORDERS_RISK_DIRECT$", "ORDERS"))
    load_config(queue("^metrics\\..*", "metrics.cpu"))
    assert_error(queue("^ORDERS.*", "ORDERS"), f"{Q}/UnderlyingTopic", "regex covered by")
    assert_error(queue("^ORDERS$|^OTHER$", "ORDERS"), f"{Q}/UnderlyingTopic", "regex covered by")
    everything = document(
        f"<SOW><Queue><Name>q</Name>{JSON}<UnderlyingTopic>^x</UnderlyingTopic>"
        "<DefaultPublishTarget>xy</DefaultPublishTarget></Queue></SOW>",
        log=f"<TransactionLog><JournalDirectory>j</JournalDirectory><Topic><Name>.*</Name>{JSON}"
        "</Topic></TransactionLog>",
    )
    assert load_config(everything).queues[0].matches_underlying("xyz")


def test_message_type_must_match_the_underlying_topic() -> None:
    assert_error(
        queue_document("<Name>blobs</Name><MessageType>json</MessageType>"),
        f"{Q}/MessageType",
        "MessageType of the underlying topic in the TransactionLog (binary)",
    )
    regex = queue_document(
        "<Name>q</Name><MessageType>binary</MessageType>"
        "<UnderlyingTopic>^ORDERS$|^blobs$</UnderlyingTopic>"
        "<DefaultPublishTarget>blobs</DefaultPublishTarget>"
    )
    assert_error(regex, f"{Q}/MessageType", "(json)")


def test_unset_env_variable_is_named_at_its_element() -> None:
    text = queue_document(f"<Name>orders</Name>{JSON}<LeasePeriod>${{LEASE}}</LeasePeriod>")
    assert_error(text, f"{Q}/LeasePeriod", "environment variable LEASE to be set")
    loaded = load_config(text, {"LEASE": "45s"})
    assert loaded.queues[0].lease_period_ms == 45_000
    with_default = queue_document(
        f"<Name>orders</Name>{JSON}<LeasePeriod>${{LEASE:-5s}}</LeasePeriod>"
    )
    assert load_config(with_default).queues[0].lease_period_ms == 5_000


def test_expressions_are_checked_through_the_hook() -> None:
    seen: list[tuple[str, str]] = []

    def check(expression: str, kind: str) -> None:
        seen.append((expression, kind))
        if "bad" in expression:
            raise FilterSyntaxError(expression, 3, "unexpected token")

    good = queue_document(
        f"<Name>orders</Name>{JSON}<Filter>/a = 1</Filter><Priority>/p</Priority>"
    )
    load_config(good, check_expression=check)
    assert seen == [("/p", "priority"), ("/a = 1", "queue-filter")]
    for element, kind in [
        ("Filter", "queue-filter"),
        ("Priority", "priority"),
        ("BarrierExpression", "barrier"),
    ]:
        bad = queue_document(f"<Name>orders</Name>{JSON}<{element}>a bad one</{element}>")
        error = assert_error(
            bad, f"{Q}/{element}", f"a valid {kind} expression", check_expression=check
        )
        assert "unexpected token at column 3" in error.expected
        assert error.value == "a bad one"


def test_several_errors_are_reported_at_once() -> None:
    text = queue_document("<Name>orders.*</Name><LeasePeriod>x</LeasePeriod><Bogus/>")
    with pytest.raises(ConfigError) as caught:
        load_config(text)
    assert isinstance(caught.value, ConfigErrors)
    assert len(caught.value.errors) >= 4
    assert str(caught.value).startswith(f"{len(caught.value.errors)} configuration errors:")
    assert f"{Q}/LeasePeriod: 'x'" in str(caught.value)
    assert caught.value.path == caught.value.errors[0].path


def action(on: str, do: str) -> str:
    return document(
        f"<SOW><Queue><Name>orders</Name>{JSON}</Queue></SOW>"
        f"<Actions><Action>{on}{do}</Action></Actions>"
    )


ON = (
    "<On><Module>amps-action-on-sow-expire-message</Module>"
    "<Options><Topic>orders</Topic><MessageType>json</MessageType></Options></On>"
)
DO = (
    "<Do><Module>amps-action-do-publish-message</Module><Options><Topic>dead</Topic>"
    "<MessageType>json</MessageType><Data>{{AMPS_DATA}}</Data></Options></Do>"
)
A = "AMPSConfig/Actions/Action[1]"


def test_a_dead_letter_action_loads() -> None:
    (loaded,) = load_config(action(ON, DO)).actions
    assert loaded.on[0].option("Topic") == "orders"


def test_unsupported_action_modules_list_the_supported_ones() -> None:
    on = "<On><Module>amps-action-on-alert</Module></On>"
    error = assert_error(action(on, DO), f"{A}/On[1]/Module", "supported action module")
    assert "amps-action-on-sow-expire-message" in error.expected
    do = "<Do><Module>amps-action-do-delete-sow</Module></Do>"
    assert_error(action(ON, do), f"{A}/Do[1]/Module", "amps-action-do-publish-message")


def test_action_structure_and_option_errors() -> None:
    assert_error(action(ON, ""), f"{A}/Do", "at least one Do")
    assert_error(
        action(ON.replace("<Topic>orders</Topic>", ""), DO),
        f"{A}/On[1]/Options/Topic",
        "option Topic",
    )
    assert_error(
        action(ON.replace("</Options>", "<Extra>1</Extra></Options>"), DO),
        f"{A}/On[1]/Options/Extra",
        "one of Topic, MessageType, Reason",
    )
    assert_error(
        action(ON.replace("</Options>", "<Reason>bored</Reason></Options>"), DO),
        f"{A}/On[1]/Options/Reason",
        "time_limit",
    )
    assert_error(
        action(ON, DO.replace("{{AMPS_DATA}}", "{{AMPS_NOPE}}")),
        f"{A}/Do[1]/Options/Data",
        "context variables",
    )
    assert_error(
        action(ON, DO.replace("<Topic>dead</Topic>", "<Topic>dead x</Topic>")),
        f"{A}/Do[1]/Options/Topic",
        "without spaces",
    )


def test_on_expire_must_name_a_queue_of_its_type() -> None:
    assert_error(
        action(ON.replace(">orders<", ">other<"), DO),
        f"{A}/On[1]/Options/Topic",
        "the Name of a configured queue",
    )
    assert_error(
        action(ON.replace(">orders<", ">^x.*<"), DO),
        f"{A}/On[1]/Options/Topic",
        "a regex matching a configured queue",
    )
    load_config(action(ON.replace(">orders<", ">^ord.*<"), DO))
    assert_error(
        action(ON.replace(">json<", ">binary<", 1), DO),
        f"{A}/On[1]/Options/MessageType",
        "MessageType of queue 'orders'",
    )


def replication(destination: str) -> str:
    return document(f"<Replication><Destination>{destination}</Destination></Replication>")


TRANSPORT = "<Transport><Type>amps-replication</Type><InetAddr>h:1</InetAddr></Transport>"
D = "AMPSConfig/Replication/Destination[1]"


def test_replication_errors() -> None:
    assert_error(replication(f"<Name>b</Name>{TRANSPORT}"), f"{D}/SyncType", "sync or async")
    assert_error(
        replication("<Name>b</Name><SyncType>sync</SyncType>"), f"{D}/Transport", "at least one"
    )
    assert_error(
        replication(f"<SyncType>sync</SyncType>{TRANSPORT}"), f"{D}/Group", "Group (or Name)"
    )
    assert_error(
        replication(
            "<Name>b</Name><SyncType>async</SyncType>"
            + TRANSPORT.replace("amps-replication", "tcp")
        ),
        f"{D}/Transport[1]/Type",
        "amps-replication",
    )
    assert_error(
        replication(
            f"<Name>b</Name><SyncType>sync</SyncType><PassThrough>(</PassThrough>{TRANSPORT}"
        ),
        f"{D}/PassThrough",
        "valid regular expression",
    )
    assert_error(
        replication(
            f"<Name>b</Name><SyncType>sync</SyncType>{TRANSPORT}"
            f"<Topic><Name>unrecorded</Name>{JSON}</Topic>"
        ),
        f"{D}/Topic[1]/Name",
        "recorded in the local TransactionLog",
    )


def test_a_destination_naming_a_local_queue_is_refused() -> None:
    """R2, issue 9: a LocalQueue is never replicated; a literal Topic naming it is a start-up
    error, while a regex that also matches it (or its underlying topic) replicates data only."""
    sow = (
        "<SOW><LocalQueue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>"
        f"{JSON}</LocalQueue></SOW>"
    )

    def with_topic(name: str) -> str:
        return document(
            sow + "<Replication><Destination><Name>b</Name><SyncType>sync</SyncType>"
            f"{TRANSPORT}<Topic><Name>{name}</Name>{JSON}</Topic></Destination></Replication>"
        )

    error = assert_error(with_topic("work"), f"{D}/Topic[1]/Name", "not a LocalQueue")
    assert "replicate its UnderlyingTopic" in error.message
    load_config(with_topic("orders"))
    load_config(with_topic("^(work|orders)$"))


def test_destination_group_defaults_to_name_and_name_to_group() -> None:
    by_name = load_config(replication(f"<Name>b</Name><SyncType>sync</SyncType>{TRANSPORT}"))
    by_group = load_config(replication(f"<Group>G</Group><SyncType>sync</SyncType>{TRANSPORT}"))
    assert by_name.replication is not None
    assert by_group.replication is not None
    assert (
        by_name.replication.destinations[0].name,
        by_name.replication.destinations[0].group,
    ) == ("b", "b")
    assert (
        by_group.replication.destinations[0].name,
        by_group.replication.destinations[0].group,
    ) == ("G", "G")


def test_refused_topologies_name_the_destination() -> None:
    """R8 start-up refusals: a peer named as this instance, a link to its own replication
    listener, and one peer configured as two destinations."""
    assert_error(
        replication(f"<Name>amps-1</Name><SyncType>sync</SyncType>{TRANSPORT}"),
        f"{D}/Name",
        "a peer other than this instance",
    )
    listener = (
        "<Transports><Transport><Name>r</Name><Type>amps-replication</Type>"
        "<InetAddr>10004</InetAddr></Transport></Transports>"
    )
    to_self = TRANSPORT.replace("h:1", "localhost:10004")
    assert_error(
        document(
            listener + "<Replication><Destination><Name>b</Name><SyncType>sync</SyncType>"
            f"{to_self}</Destination></Replication>"
        ),
        f"{D}/Transport[1]/InetAddr[1]",
        "own amps-replication transport",
    )
    twice = f"<Destination><Name>b</Name><SyncType>async</SyncType>{TRANSPORT}</Destination>"
    assert_error(
        document(f"<Replication>{twice}{twice}</Replication>"),
        "AMPSConfig/Replication/Destination[2]/Name",
        "not already a destination at AMPSConfig/Replication/Destination[1]",
    )


def test_one_way_and_archive_destinations_are_accepted() -> None:
    """R8: replication may be one-way, and a destination may take only some topics."""
    archive = load_config(
        replication(
            f"<Name>archive</Name><SyncType>async</SyncType>{TRANSPORT}"
            f"<Topic><Name>orders</Name>{JSON}</Topic>"
        )
    )
    assert archive.replication is not None
    destination = archive.replication.destination("archive")
    assert destination is not None
    assert [t.name for t in destination.topics] == ["orders"]
    assert archive.replication.destination("nobody") is None


WORK_QUEUE = (
    f"<SOW><Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>{JSON}</Queue></SOW>"
)


def to(name: str, body: str = "", group: str | None = None) -> str:
    group_element = f"<Group>{group}</Group>" if group else ""
    return (
        f"<Destination><Name>{name}</Name>{group_element}<SyncType>sync</SyncType>"
        f"{TRANSPORT}{body}</Destination>"
    )


def topics(*names: str, filter_text: str = "") -> str:
    flt = f"<Filter>{filter_text}</Filter>" if filter_text else ""
    return "".join(f"<Topic><Name>{n}</Name>{JSON}{flt}</Topic>" for n in names)


def queue_replication(*destinations: str, group: str = "") -> str:
    group_element = f"<Group>{group}</Group>" if group else ""
    return document(
        f"{group_element}{WORK_QUEUE}<Replication>{''.join(destinations)}</Replication>"
    )


def test_a_destination_that_takes_a_queue_must_take_its_underlying_topic() -> None:
    """R8: the queue's messages are stored on its UnderlyingTopic; a destination that takes
    the queue (its Topic matches the queue's name) without them holds an empty queue."""
    error = assert_error(
        queue_replication(to("b", topics("work"))), f"{D}/Topic", "UnderlyingTopic 'orders'"
    )
    assert error.value == "work"
    load_config(queue_replication(to("b", topics("work", "orders"))))
    load_config(queue_replication(to("b", topics("w.*", "^orders$"))))
    load_config(queue_replication(to("b")))  # no Topic: every topic


def test_a_replication_filter_on_the_underlying_topic_must_be_the_queues_own() -> None:
    filtered = to("b", topics("work") + topics("orders", filter_text="/x > 1"))
    assert_error(queue_replication(filtered), f"{D}/Topic", "the queue's own Filter")
    same = (
        "<SOW><Queue><Name>work</Name><UnderlyingTopic>orders</UnderlyingTopic>"
        f"{JSON}<Filter>/x &gt; 1</Filter></Queue></SOW>"
    )
    load_config(document(f"{same}<Replication>{filtered}</Replication>"))


def test_replicating_only_the_underlying_topic_to_an_archive_is_accepted() -> None:
    """R8: the archive takes `orders`, not `work`: data only, no queue rules apply."""
    load_config(queue_replication(to("archive", topics("orders"))))


def test_passthrough_between_the_groups_a_queue_spans() -> None:
    """R8 (seed 004's A -> B -> C): b replicates the queue to a and to c, so each of those
    destinations passes the other's group through."""
    text = queue_replication(
        to("a", "<PassThrough>X</PassThrough>", group="A"),
        to("c", group="C"),
        group="B",
    )
    errors = errors_of(text)
    paths = {(e.path, e.value) for e in errors}
    assert paths == {
        (f"{D}/PassThrough", "X"),
        ("AMPSConfig/Replication/Destination[2]/PassThrough", None),
    }
    first = next(e for e in errors if e.path == f"{D}/PassThrough")
    assert (
        "a PassThrough matching group 'C': queue 'work' is replicated to a and with c (group C)"
        in first.expected
    )
    load_config(
        queue_replication(
            to("a", "<PassThrough>C</PassThrough>", group="A"),
            to("c", "<PassThrough>A</PassThrough>", group="C"),
            group="B",
        )
    )


def test_passthrough_within_the_instances_own_group() -> None:
    """R8 (seed 004's X -> Y inside GroupOne): an instance passes its own group through to a
    destination in that group; a destination in another group alone needs no PassThrough."""
    assert_error(
        queue_replication(to("y", group="One"), group="One"),
        f"{D}/PassThrough",
        "group 'One': queue 'work' is replicated to y and with this instance's own group One",
    )
    load_config(
        queue_replication(to("y", "<PassThrough>One</PassThrough>", group="One"), group="One")
    )
    load_config(queue_replication(to("b", group="Two"), group="One"))


def test_a_local_queue_needs_no_passthrough() -> None:
    local = WORK_QUEUE.replace("Queue>", "LocalQueue>")
    load_config(
        document(f"<Group>One</Group>{local}<Replication>{to('y', group='One')}</Replication>")
    )


SCHEDULE = (
    "<On><Module>amps-action-on-schedule</Module><Options><Every>100ms</Every></Options></On>"
)
DOWNGRADE = (
    "<Do><Module>amps-action-do-downgrade-replication</Module>"
    "<Options><Age>500ms</Age></Options></Do>"
)
UPGRADE = (
    "<Do><Module>amps-action-do-upgrade-replication</Module>"
    "<Options><Age>100ms</Age></Options></Do>"
)


def test_replication_downgrade_and_upgrade_actions_load() -> None:
    """L2: the AMPS shape of scheduled downgrade/upgrade actions (AMPS-REFERENCE §4)."""
    from amps.config.actions import interval_ms

    config = load_config(
        document(f"<Actions><Action>{SCHEDULE}{DOWNGRADE}{UPGRADE}</Action></Actions>")
    )
    (action,) = config.actions
    assert interval_ms(action.on[0], "Every") == 100
    assert [interval_ms(do, "Age") for do in action.do] == [500, 100]


def test_replication_actions_refuse_bad_options_and_pairings() -> None:
    A = "AMPSConfig/Actions/Action[1]"
    assert_error(
        document(
            f"<Actions><Action>{SCHEDULE.replace('100ms', 'soon')}{DOWNGRADE}</Action></Actions>"
        ),
        f"{A}/On[1]/Options/Every",
        "",
    )
    publish = (
        "<Do><Module>amps-action-do-publish-message</Module><Options><Topic>t</Topic>"
        "<MessageType>json</MessageType><Data>x</Data></Options></Do>"
    )
    assert_error(
        document(f"<Actions><Action>{SCHEDULE}{publish}</Action></Actions>"),
        f"{A}/On[1]/Module",
        "runs amps-action-do-publish-message",
    )
