"""One error hierarchy for the whole broker.

```
AmpsError
├── ConfigError            (path, value, expected)                   not retriable
├── ClientError            the caller's fault; the instance carries on unchanged
│   ├── FilterSyntaxError  (expression, column)
│   ├── InvalidTopic
│   ├── UnknownTopic
│   ├── InvalidBookmark
│   ├── InvalidOptions
│   ├── MessageTooLarge    (size_bytes, max_size_bytes)
│   ├── NameInUse
│   ├── LogonRequired
│   ├── UnknownCommand
│   ├── NotEntitled
│   ├── AuthenticationFailed  (unknown user and wrong password alike)
│   ├── NotAQueue
│   ├── UnknownBookmark
│   └── LimitExceeded      (limit) a client limit of S5: subscriptions, bookmarks per ack
├── ServerError            the instance's or a peer's fault
│   ├── Unavailable        retriable
│   │   ├── TransportDisabled  (transport) an administrator keeps clients out
│   │   └── TooManyConnections  the transport's MaxConnections are in use
│   ├── CorruptRecord      (segment, offset)
│   ├── JournalError       (fsync or write failure: fatal for the instance)
│   └── OwnershipProtocolError  a peer or the adapter broke the ownership rules (R2-R7)
├── ConnectionClosed       the client closed the connection itself
└── ConnectionBroken       the instance or the network dropped it (retriable)
```

Every class has a stable `code` (sent in failed acks and gRPC status details so the client can
rebuild the same class with `error_for_code`), an AMPS `reason` word for failed acks, and
`retriable`.
"""

from __future__ import annotations

from typing import ClassVar


class AmpsError(Exception):
    """Root of every error the broker raises on purpose."""

    code: ClassVar[str] = "error"
    reason: ClassVar[str] = "error"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(AmpsError):
    """A configuration mistake: names the element path, the bad value and what was expected."""

    code = "config"
    reason = "invalid configuration"

    def __init__(self, path: str, value: str | None, expected: str) -> None:
        shown = "(missing)" if value is None else _shown_value(value)
        super().__init__(f"{path}: {shown}: expected {expected}")
        self.path = path
        self.value = value
        self.expected = expected


# A value quoted in a message is cut here: a 50 MB element must not make a 50 MB message.
SHOWN_VALUE_CHARACTERS = 80


def _shown_value(value: str) -> str:
    if len(value) <= SHOWN_VALUE_CHARACTERS:
        return repr(value)
    return f"{value[:SHOWN_VALUE_CHARACTERS]!r}... ({len(value)} characters)"


class ClientError(AmpsError):
    """The caller sent something wrong; nothing changed on the instance."""

    code = "client"
    reason = "invalid options"


class FilterSyntaxError(ClientError):
    """An expression that does not parse or type-check; `column` is 1-based."""

    code = "bad_filter"
    reason = "bad filter"

    def __init__(self, expression: str, column: int, detail: str) -> None:
        super().__init__(f"{detail} at column {column}")
        self.expression = expression
        self.column = column
        self.detail = detail


class InvalidTopic(ClientError):
    """A topic that is empty, too long, a regex where a name is needed, or a bad regex."""

    code = "invalid_topic"
    reason = "invalid topic"


class UnknownTopic(ClientError):
    """A topic this instance does not know."""

    code = "unknown_topic"
    reason = "invalid topic"


class InvalidBookmark(ClientError):
    """A bookmark that does not parse or is not in the transaction log."""

    code = "invalid_bookmark"
    reason = "invalid bookmark"


class InvalidOptions(ClientError):
    """Options, ids or arguments of a command that are not valid."""

    code = "invalid_options"
    reason = "invalid options"


class MessageTooLarge(ClientError):
    """A message over the configured maximum size; rejected before it is buffered."""

    code = "message_too_large"
    reason = "message too large"

    def __init__(self, size_bytes: int, max_size_bytes: int) -> None:
        super().__init__(f"message of {size_bytes} bytes exceeds the maximum of {max_size_bytes}")
        self.size_bytes = size_bytes
        self.max_size_bytes = max_size_bytes


class NameInUse(ClientError):
    """The client name is held by a connection of another user (L6), or was taken over."""

    code = "name_in_use"
    reason = "name in use"


class LogonRequired(ClientError):
    """A command sent before the connection's logon."""

    code = "logon_required"
    reason = "logon required"


class UnknownCommand(ClientError):
    """A command this instance does not know."""

    code = "unknown_command"
    reason = "unknown command"


class NotEntitled(ClientError):
    """The user may not do this."""

    code = "not_entitled"
    reason = "not entitled"


class AuthenticationFailed(ClientError):
    """A logon whose user and password do not match the users file (or too many attempts).

    The same answer whether the user is unknown or the password wrong (S7)."""

    code = "auth_failure"
    reason = "auth failure"


class NotAQueue(ClientError):
    """A queue command (ack, sow) on a topic that is not a queue."""

    code = "not_a_queue"
    reason = "not supported"


class UnknownBookmark(ClientError):
    """An ack naming a message this instance never received."""

    code = "unknown_bookmark"
    reason = "invalid bookmark"


class LimitExceeded(ClientError):
    """A request past one of the client limits (S5); the connection stays up."""

    code = "limit_exceeded"
    reason = "limit exceeded"

    def __init__(self, limit: str, detail: str) -> None:
        super().__init__(f"{detail} ({limit})")
        self.limit = limit


class ServerError(AmpsError):
    """The instance (or a peer) failed; the request may succeed elsewhere or later."""

    code = "server"
    reason = "server error"


class Unavailable(ServerError):
    """The instance cannot serve the request now; try again or elsewhere."""

    code = "unavailable"
    reason = "unavailable"
    retriable = True


class TransportDisabled(Unavailable):
    """The client transport is disabled (InitialState or an administrator); clients fail over.

    The instance takes no client connections until `amps admin transport enable NAME`."""

    code = "transport_disabled"
    reason = "transport disabled"

    def __init__(self, transport: str) -> None:
        super().__init__(
            f"transport {transport!r} is disabled: this instance takes no client connections "
            f"until an administrator runs `amps admin transport enable {transport}`"
        )
        self.transport = transport


class TooManyConnections(Unavailable):
    """The client transport holds MaxConnections connections: refused, try later or elsewhere."""

    code = "too_many_connections"
    reason = "too many connections"


class CorruptRecord(ServerError):
    """A journal record whose frame or checksum is wrong."""

    code = "corrupt_record"
    reason = "tx store failure"

    def __init__(self, message: str, segment: str = "", offset: int = 0) -> None:
        super().__init__(message)
        self.segment = segment
        self.offset = offset


class JournalError(ServerError):
    """Writing or syncing the journal failed; the instance must stop, never pretend success."""

    code = "journal"
    reason = "tx store failure"


class OwnershipProtocolError(ServerError):
    """An ownership event that is illegal in the message's state; the state is unchanged."""

    code = "ownership_protocol"
    reason = "ownership protocol error"


class ConnectionClosed(AmpsError):
    """The client closed its own connection."""

    code = "connection_closed"
    reason = "connection closed"


class ConnectionBroken(AmpsError):
    """The instance or the network dropped the connection."""

    code = "connection_broken"
    reason = "connection broken"
    retriable = True


def _all_subclasses(cls: type[AmpsError]) -> list[type[AmpsError]]:
    """The classes of this module below `cls` (subclasses elsewhere share their parent's code)."""
    found: list[type[AmpsError]] = []
    for sub in cls.__subclasses__():
        if sub.__module__ == __name__:
            found.append(sub)
        found.extend(_all_subclasses(sub))
    return found


_CLASSES: list[type[AmpsError]] = [AmpsError, *_all_subclasses(AmpsError)]
_BY_CODE: dict[str, type[AmpsError]] = {c.code: c for c in _CLASSES}


def error_for_code(code: str, message: str) -> AmpsError:
    """Rebuild an error sent by the instance as the same class, carrying the instance's message.

    Classes with extra constructor fields are rebuilt without them: only the message crosses the
    wire.
    """
    cls = _BY_CODE.get(code)
    if cls is None:
        return ServerError(message) if code else AmpsError(message)
    error = cls.__new__(cls)
    AmpsError.__init__(error, message)
    return error
