"""Every element of AMPS-REFERENCE §1 that we support is parsed into the typed configuration."""

from __future__ import annotations

from amps.config import (
    ActionStep,
    AdminConfig,
    InetAddr,
    RawElement,
    ReplicationTransportConfig,
    load_config,
)

from .helpers import LOG, document

FULL = """
<AMPSConfig>
  <Name>amps-east</Name>
  <Group>EAST</Group>
  <!-- The admin port listens beyond loopback: open on purpose (default-deny, issue 12). -->
  <Authentication><Mode>none</Mode></Authentication>
  <Admin>
    <InetAddr>0.0.0.0:8085</InetAddr>
    <FileName>stats.db</FileName>
    <Interval>5s</Interval>
  </Admin>
  <Transports>
    <Transport>
      <Name>clients</Name><Type>grpc</Type><InetAddr>9007</InetAddr>
      <MaxMessageSize>4MB</MaxMessageSize>
    </Transport>
    <Transport>
      <Name>replication</Name><Type>amps-replication</Type><InetAddr>[::1]:10004</InetAddr>
    </Transport>
  </Transports>
  <TransactionLog>
    <JournalDirectory>${DATA}/journal</JournalDirectory>
    <JournalArchiveDirectory>${DATA}/archive</JournalArchiveDirectory>
    <MinJournalSize>64KB</MinJournalSize>
    <FlushInterval>250us</FlushInterval>
    <PreallocatedJournalFiles>3</PreallocatedJournalFiles>
    <Topic><Name>^ORDERS(_RISK_DIRECT)?$</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>Jobs</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>FailedJobs</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>images</Name><MessageType>binary</MessageType></Topic>
  </TransactionLog>
  <SOW>
    <Queue>
      <Name>ORDERS_RISK</Name>
      <MessageType>json</MessageType>
      <UnderlyingTopic>^ORDERS(_RISK_DIRECT)?$</UnderlyingTopic>
      <DefaultPublishTarget>ORDERS_RISK_DIRECT</DefaultPublishTarget>
      <Semantics>at-least-once</Semantics>
      <LeasePeriod>1m</LeasePeriod>
      <Expiration>1h</Expiration>
      <ExpirationModel>latest</ExpirationModel>
      <MaxBacklog>10k</MaxBacklog>
      <MaxPerSubscriptionBacklog>50</MaxPerSubscriptionBacklog>
      <MaxCancels>3</MaxCancels>
      <MaxDeliveries>10</MaxDeliveries>
      <FairnessModel>fast</FairnessModel>
      <Leasing>strict</Leasing>
      <Priority>/priority</Priority>
      <Filter>/region = 'EU'</Filter>
      <RecoveryPoint>20240101T000000Z</RecoveryPoint>
      <FileBackedMetadata>enabled</FileBackedMetadata>
      <DeferredAckExpiration>2d</DeferredAckExpiration>
    </Queue>
    <QueueDefinition>
      <Topic>Jobs</Topic>
      <MessageType>json</MessageType>
      <Semantics>at-most-once</Semantics>
      <BarrierExpression>/barrier = 1</BarrierExpression>
      <RecoveryPoint>now</RecoveryPoint>
    </QueueDefinition>
    <LocalQueue>
      <Name>images</Name>
      <MessageType>binary</MessageType>
      <TargetQueueDepth>1000</TargetQueueDepth>
    </LocalQueue>
    <GroupLocalQueue>
      <Name>orders-group</Name>
      <MessageType>json</MessageType>
      <UnderlyingTopic>ORDERS</UnderlyingTopic>
      <InitialOwner>amps-west</InitialOwner>
      <GroupLocalQueueDomain>GLOBAL</GroupLocalQueueDomain>
      <DefaultTransferLatency>40ms</DefaultTransferLatency>
      <TransferRequestTimeout>2.5s</TransferRequestTimeout>
    </GroupLocalQueue>
  </SOW>
  <Actions>
    <Action>
      <On>
        <Module>amps-action-on-sow-expire-message</Module>
        <Options>
          <Topic>Jobs</Topic><MessageType>json</MessageType>
          <Reason>max_cancels,max_deliveries</Reason>
        </Options>
      </On>
      <Do>
        <Module>amps-action-do-publish-message</Module>
        <Options>
          <MessageType>json</MessageType>
          <Topic>FailedJobs</Topic>
          <Data>{ "message": {{AMPS_DATA}}, "reason": "{{AMPS_REASON}}" }</Data>
        </Options>
      </Do>
    </Action>
  </Actions>
  <Replication>
    <Destination>
      <Name>amps-west</Name>
      <Group>WEST</Group>
      <SyncType>sync</SyncType>
      <PassThrough>.*</PassThrough>
      <ResyncPassThrough>EAST|WEST</ResyncPassThrough>
      <Compression>enabled</Compression>
      <CompressionType>zstd</CompressionType>
      <AckConflationInterval>100ms</AckConflationInterval>
      <Topic><Name>Jobs</Name><MessageType>json</MessageType><Filter>/x = 1</Filter></Topic>
      <Topic><MessageType>json</MessageType></Topic>
      <Transport>
        <Type>amps-replication</Type>
        <InetAddr>west-1:10004</InetAddr>
        <InetAddr>west-2:10004</InetAddr>
        <ReconnectTimeout>5s</ReconnectTimeout>
      </Transport>
    </Destination>
  </Replication>
  <Logging><Target><Protocol>stdout</Protocol><Level>${LEVEL:-info}</Level></Target></Logging>
  <Tuning><Queue><QueueDeliveryFlushInterval>250us</QueueDeliveryFlushInterval></Queue></Tuning>
</AMPSConfig>
"""


def test_instance_admin_and_transports() -> None:
    config = load_config(FULL, {"DATA": "/srv/amps"})
    assert (config.name, config.group) == ("amps-east", "EAST")
    assert config.admin == AdminConfig(InetAddr("0.0.0.0", 8085), "stats.db", 5_000)
    grpc = config.grpc_transport
    assert grpc is not None
    assert (grpc.name, grpc.inet_addr, grpc.max_message_size_bytes) == (
        "clients",
        InetAddr("127.0.0.1", 9007),
        4 * 1024 * 1024,
    )
    replication = config.replication_transport
    assert replication is not None
    assert replication.inet_addr == InetAddr("::1", 10004)
    assert str(replication.inet_addr) == "[::1]:10004"
    assert replication.max_message_size_bytes == 1_048_576


def test_transaction_log_elements_and_env_expansion() -> None:
    log = load_config(FULL, {"DATA": "/srv/amps"}).transaction_log
    assert log is not None
    assert log.journal_directory == "/srv/amps/journal"
    assert log.journal_archive_directory == "/srv/amps/archive"
    assert log.journal_size_bytes == 65_536
    assert log.flush_interval_us == 250
    assert log.preallocated_journal_files == 3
    assert [t.name for t in log.topics][1:] == ["Jobs", "FailedJobs", "images"]
    assert log.records_topic("ORDERS_RISK_DIRECT")
    assert not log.records_topic("ORDERS_X")
    assert log.message_type_for("images") == "binary"
    assert log.message_type_for("nothing") is None


def test_every_queue_element() -> None:
    config = load_config(FULL, {"DATA": "/srv/amps"})
    risk = config.queue("ORDERS_RISK")
    assert risk is not None
    assert risk.kind == "Queue"
    assert risk.underlying_is_regex
    assert risk.default_publish_target == "ORDERS_RISK_DIRECT"
    assert risk.matches_underlying("ORDERS")
    assert not risk.matches_underlying("ORDERS_RISK")
    assert (risk.lease_period_ms, risk.expiration_ms) == (60_000, 3_600_000)
    assert risk.expiration_model == "latest"
    assert (risk.max_backlog, risk.max_per_subscription_backlog) == (10_000, 50)
    assert (risk.max_cancels, risk.max_deliveries) == (3, 10)
    assert (risk.fairness_model, risk.leasing) == ("fast", "strict")
    assert (risk.priority, risk.filter) == ("/priority", "/region = 'EU'")
    assert risk.recovery_point == "20240101T000000Z"
    assert risk.file_backed_metadata
    assert risk.deferred_ack_expiration_ms == 2 * 86_400_000
    assert risk.initial_owner is None
    assert risk.group_local_queue_domain is None


def test_queue_definition_synonym_and_at_most_once_defaults() -> None:
    jobs = load_config(FULL, {"DATA": "/srv/amps"}).queue("Jobs")
    assert jobs is not None
    assert jobs.kind == "Queue"
    assert (jobs.underlying_topic, jobs.default_publish_target) == ("Jobs", "Jobs")
    assert jobs.semantics == "at-most-once"
    assert jobs.fairness_model == "round-robin"
    assert jobs.barrier_expression == "/barrier = 1"
    assert jobs.recovery_point == "now"


def test_local_and_group_local_queues() -> None:
    config = load_config(FULL, {"DATA": "/srv/amps"})
    images = config.queue("images")
    group_queue = config.queue("orders-group")
    assert images is not None
    assert group_queue is not None
    assert images.kind == "LocalQueue"
    assert images.target_queue_depth == 1000
    assert group_queue.kind == "GroupLocalQueue"
    assert group_queue.initial_owner == "amps-west"
    assert group_queue.group_local_queue_domain == "GLOBAL"
    assert group_queue.default_transfer_latency_ms == 40
    assert group_queue.transfer_request_timeout_ms == 2_500
    assert [q.name for q in config.queues] == ["ORDERS_RISK", "Jobs", "images", "orders-group"]


def test_actions_keep_options_in_file_order() -> None:
    (action,) = load_config(FULL, {"DATA": "/srv/amps"}).actions
    (on,) = action.on
    (do,) = action.do
    assert on.module == "amps-action-on-sow-expire-message"
    assert dict(on.options) == {
        "Topic": "Jobs",
        "MessageType": "json",
        "Reason": "max_cancels,max_deliveries",
    }
    assert do == ActionStep(
        "amps-action-do-publish-message",
        {
            "MessageType": "json",
            "Topic": "FailedJobs",
            "Data": '{ "message": {{AMPS_DATA}}, "reason": "{{AMPS_REASON}}" }',
        },
    )
    assert list(do.options) == ["MessageType", "Topic", "Data"]
    assert do.option("Topic") == "FailedJobs"
    assert do.option("Nope") is None


def test_replication_destinations_are_typed() -> None:
    replication = load_config(FULL, {"DATA": "/srv/amps"}).replication
    assert replication is not None
    (west,) = replication.destinations
    assert (west.name, west.group, west.sync_type) == ("amps-west", "WEST", "sync")
    assert (west.pass_through, west.resync_pass_through) == (".*", "EAST|WEST")
    assert (west.compression, west.compression_type) == (True, "zstd")
    assert west.ack_conflation_interval_ms == 100
    assert west.transports == (
        ReplicationTransportConfig(
            "amps-replication", (InetAddr("west-1", 10004), InetAddr("west-2", 10004)), 5_000
        ),
    )
    jobs, everything = west.topics
    assert (jobs.name, jobs.filter) == ("Jobs", "/x = 1")
    assert everything.name == ".*"
    assert everything.matches("anything")


def test_reserved_sections_are_kept_as_written() -> None:
    config = load_config(FULL, {"DATA": "/srv/amps"})
    logging = config.reserved_section("Logging")
    assert logging == RawElement(
        "Logging",
        "",
        (
            RawElement(
                "Target",
                "",
                (RawElement("Protocol", "stdout"), RawElement("Level", "info")),
            ),
        ),
    )
    assert config.reserved_section("Tuning") is not None
    assert config.reserved_section("Modules") is None


def test_defaults_of_a_minimal_document() -> None:
    config = load_config(
        document("<SOW><Queue><Name>orders</Name><MessageType>json</MessageType></Queue></SOW>")
    )
    assert config.group == "amps-1"
    assert config.admin is None
    assert config.transports == ()
    assert config.grpc_transport is None
    assert config.replication is None
    assert config.actions == ()
    log = config.transaction_log
    assert log is not None
    assert log.journal_size_bytes == 1024**3
    assert log.flush_interval_us == 100_000
    assert log.preallocated_journal_files == 2
    (queue,) = config.queues
    assert queue.semantics == "at-least-once"
    assert queue.fairness_model == "proportional"
    assert queue.leasing == "sublet"
    assert queue.lease_period_ms is None
    assert queue.expiration_ms is None
    assert queue.max_backlog is None
    assert queue.max_per_subscription_backlog == 1
    assert (queue.max_cancels, queue.max_deliveries) == (0, 0)
    assert queue.recovery_point == "epoch"
    assert queue.deferred_ack_expiration_ms == 86_400_000
    assert (queue.default_transfer_latency_ms, queue.transfer_request_timeout_ms) == (250, 1_000)
    assert queue.expiration_model == "default"
    assert not queue.file_backed_metadata


def test_admin_without_inet_addr_keeps_statistics_only() -> None:
    config = load_config(document("<Admin><Interval>1s</Interval></Admin>"))
    assert config.admin == AdminConfig(None, ":memory:", 1_000)


def test_group_local_queue_domain_defaults_to_the_instance_group() -> None:
    config = load_config(
        f"<AMPSConfig><Name>a</Name><Group>G</Group>{LOG}<SOW><GroupLocalQueue>"
        "<Name>orders</Name><MessageType>json</MessageType><InitialOwner>a</InitialOwner>"
        "</GroupLocalQueue></SOW></AMPSConfig>"
    )
    assert config.queues[0].group_local_queue_domain == "G"


def test_config_is_frozen_and_hashable_where_it_can_be() -> None:
    config = load_config(document(""))
    assert hash(config.transaction_log) == hash(config.transaction_log)
