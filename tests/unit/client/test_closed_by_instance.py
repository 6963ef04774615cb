"""The instance's `Disconnect` message becomes the error a client reports (issue 8)."""

from __future__ import annotations

from amps import errors
from amps.client.connection import closed_by_instance
from amps.v1 import client_pb2 as pb


def test_the_error_is_of_the_class_the_instance_named_with_its_reason() -> None:
    error = closed_by_instance(
        pb.Disconnect(
            reason="name in use: client name 'a' logged on elsewhere", error_code="name_in_use"
        )
    )
    assert isinstance(error, errors.NameInUse)
    assert str(error) == "closed by the instance: name in use: client name 'a' logged on elsewhere"


def test_an_unknown_or_missing_code_is_still_an_error_with_the_reason() -> None:
    unknown = closed_by_instance(pb.Disconnect(reason="\x00odd", error_code="no-such-code"))
    assert type(unknown) is errors.ServerError
    assert str(unknown) == "closed by the instance: \x00odd"
    assert type(closed_by_instance(pb.Disconnect())) is errors.AmpsError
