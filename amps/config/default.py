"""The built-in configuration `amps server` runs with when no --config is given."""

from __future__ import annotations

DEFAULT_CONFIG_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- Built-in default: one instance, gRPC on 127.0.0.1:9007, admin HTTP on 127.0.0.1:8085. -->
<AMPSConfig>
  <Name>amps-1</Name>
  <Admin>
    <InetAddr>127.0.0.1:8085</InetAddr>
  </Admin>
  <Transports>
    <Transport>
      <Name>grpc</Name>
      <Type>grpc</Type>
      <InetAddr>127.0.0.1:9007</InetAddr>
      <MaxMessageSize>1MB</MaxMessageSize>
    </Transport>
  </Transports>
  <TransactionLog>
    <JournalDirectory>./data/journal</JournalDirectory>
    <JournalSize>1GB</JournalSize>
    <FlushInterval>100ms</FlushInterval>
    <!-- Record every topic, so any topic can be replayed and used under a queue. -->
    <Topic>
      <Name>.*</Name>
      <MessageType>json</MessageType>
    </Topic>
  </TransactionLog>
  <SOW>
    <Queue>
      <Name>work</Name>
      <MessageType>json</MessageType>
      <UnderlyingTopic>orders</UnderlyingTopic>
      <LeasePeriod>30s</LeasePeriod>
      <MaxPerSubscriptionBacklog>100</MaxPerSubscriptionBacklog>
    </Queue>
  </SOW>
</AMPSConfig>
"""
