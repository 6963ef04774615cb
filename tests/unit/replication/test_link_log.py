"""What the replication adapter logs when a link closes (issue 8)."""

from __future__ import annotations

import logging

import pytest

from replication.link import _log_close
from replication.link_core import Close


def test_a_duplicate_link_is_not_reported_at_normal_operation_but_other_refusals_are(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both sides of a pair dial, so one stream is refused as duplicate_link at every start:
    DEBUG only. Any other refusal needs an operator: ERROR."""
    caplog.set_level(logging.DEBUG, logger="amps.replication")
    _log_close(
        "a", Close("by a: a and c: a link between them is already up", True, "duplicate_link")
    )
    _log_close(
        "b",
        Close("by b: a and b (group x): the destination's Group is 'y'", True, "group_mismatch"),
    )
    levels = [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records]
    assert levels == [
        (logging.DEBUG, "replication link to a refused"),
        (logging.ERROR, "replication link to b refused"),
    ]
