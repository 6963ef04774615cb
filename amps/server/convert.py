"""protobuf <-> broker values: the only server module that builds acks and deliveries.

Also the one table mapping error classes to gRPC status codes.
"""

from __future__ import annotations

import grpc

from amps import errors
from amps.v1 import client_pb2 as pb

GRPC_STATUS: dict[type[errors.AmpsError], grpc.StatusCode] = {
    errors.ClientError: grpc.StatusCode.INVALID_ARGUMENT,
    errors.LogonRequired: grpc.StatusCode.FAILED_PRECONDITION,
    errors.NameInUse: grpc.StatusCode.ABORTED,
    errors.NotEntitled: grpc.StatusCode.PERMISSION_DENIED,
    errors.MessageTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.ServerError: grpc.StatusCode.INTERNAL,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
}


def grpc_status_for(error: errors.AmpsError) -> grpc.StatusCode:
    """The gRPC status for an error: the entry of its nearest class in GRPC_STATUS."""
    for cls in type(error).__mro__:
        if cls in GRPC_STATUS:
            return GRPC_STATUS[cls]
    return grpc.StatusCode.UNKNOWN


def failure_ack(
    error: errors.AmpsError, *, cmd_id: str, ack_type: str, seq: int = 0, sub_id: str = ""
) -> pb.ServerMessage:
    """A failed ack whose reason reads `<AMPS reason>: <detail>`."""
    return pb.ServerMessage(
        ack=pb.Ack(
            cmd_id=cmd_id,
            ack_type=ack_type,
            status="failure",
            reason=f"{error.reason}: {error.message}",
            error_code=error.code,
            seq=seq,
            sub_id=sub_id,
        )
    )


def success_ack(*, cmd_id: str, ack_type: str, **fields: object) -> pb.ServerMessage:
    """A successful ack with extra fields (seq, bookmark, sub_id, options, ...)."""
    return pb.ServerMessage(
        ack=pb.Ack(cmd_id=cmd_id, ack_type=ack_type, status="success", **fields)  # type: ignore[arg-type]
    )


def requested(ack_types: str, kind: str) -> bool:
    """Whether a command's comma-separated ack_type asks for `kind`."""
    return kind in (part.strip() for part in ack_types.split(","))
