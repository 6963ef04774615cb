"""[core] AMPS-style XML configuration text -> frozen dataclasses; the caller reads the file.

Every mistake is a ConfigError naming the element path, the bad value and what was expected;
`load_config` reports all of them at once (`ConfigErrors.errors`).
"""

from amps.config.default import DEFAULT_CONFIG_XML
from amps.config.load import ConfigErrors, decode_config, default_config, load_config
from amps.config.model import (
    ActionConfig,
    ActionStep,
    AdminConfig,
    Config,
    DestinationConfig,
    InetAddr,
    QueueConfig,
    RawElement,
    ReplicationConfig,
    ReplicationTopicConfig,
    ReplicationTransportConfig,
    TopicConfig,
    TransactionLogConfig,
    TransportConfig,
)

__all__ = [
    "DEFAULT_CONFIG_XML",
    "ActionConfig",
    "ActionStep",
    "AdminConfig",
    "Config",
    "ConfigErrors",
    "DestinationConfig",
    "InetAddr",
    "QueueConfig",
    "RawElement",
    "ReplicationConfig",
    "ReplicationTopicConfig",
    "ReplicationTransportConfig",
    "TopicConfig",
    "TransactionLogConfig",
    "TransportConfig",
    "decode_config",
    "default_config",
    "load_config",
]
