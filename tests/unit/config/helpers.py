"""Builders for configuration test documents."""

from __future__ import annotations

import pytest

from amps.config import Config, ConfigErrors, load_config
from amps.errors import ConfigError

LOG = """
  <TransactionLog>
    <JournalDirectory>/tmp/j</JournalDirectory>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>ORDERS</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>ORDERS_RISK_DIRECT</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>blobs</Name><MessageType>binary</MessageType></Topic>
    <Topic><Name>^metrics\\..*</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
"""


def document(body: str, *, log: str = LOG, name: str = "<Name>amps-1</Name>") -> str:
    """A minimal valid document with `body` inserted after the transaction log."""
    return f"<AMPSConfig>{name}{log}{body}</AMPSConfig>"


def queue_document(queue_body: str, tag: str = "Queue") -> str:
    return document(f"<SOW><{tag}>{queue_body}</{tag}></SOW>")


def load(text: str, **kwargs: object) -> Config:
    return load_config(text, **kwargs)  # type: ignore[arg-type]


def errors_of(text: str, **kwargs: object) -> tuple[ConfigError, ...]:
    """Load `text`, which must fail, and return every error found."""
    with pytest.raises(ConfigErrors) as caught:
        load_config(text, **kwargs)  # type: ignore[arg-type]
    return caught.value.errors


def assert_error(text: str, path: str, expected_part: str, **kwargs: object) -> ConfigError:
    """The load fails with an error at exactly `path` whose expectation contains `expected_part`."""
    errors = errors_of(text, **kwargs)
    for error in errors:
        if error.path == path and expected_part in error.expected:
            return error
    shown = "\n".join(error.message for error in errors)
    raise AssertionError(f"no error at {path} expecting {expected_part!r}; got:\n{shown}")
