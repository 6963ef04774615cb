"""Send now, coalesce under load: the batching rule of every writer that batches (pure core).

A writer (the client's command frames, the instance's delivery frames, the replication link)
queues messages and writes frames. The rule, as in TCP corking and nats.py's flusher:

- when nothing is in flight, what is queued leaves at once, as one frame: an idle connection
  never waits on a timer;
- what is queued while a frame is in flight rides the next frame, written as soon as the
  write in flight completes: under load, frames fill by themselves;
- a frame holds at most `max_messages` messages and `max_bytes` bytes (one larger message
  travels alone); more queued means more frames.

An optional linger (`linger_ms` > 0) holds a partly filled frame up to that long after the
writer first sees it, for callers that trade latency for fewer frames. The default is 0.

No clock and no I/O here: time is an argument. Two forms of the same rule: `Coalescer` for a
writer that decides frame ends as commands are queued (the client, the replication link), and
`frame_split` for one that decides them when it writes (the instance's outbox, where the write
in flight is the gRPC response generator's suspended `yield`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """The bound on one frame: messages and bytes (a single larger message goes alone)."""

    max_messages: int
    max_bytes: int

    def __post_init__(self) -> None:
        assert self.max_messages >= 1, "a frame holds at least one message"
        assert self.max_bytes >= 1, "a frame holds at least one byte"


class Coalescer:
    """Where frames end and when the next one may be written (`next_send_ms`)."""

    __slots__ = (
        "_closed_counts",
        "_frame_bytes",
        "_frame_messages",
        "_linger_from_ms",
        "frames_sent",
        "frames_sent_idle",
        "in_flight",
        "limits",
        "linger_ms",
        "max_in_flight",
        "queued_frames",
        "queued_messages",
    )

    def __init__(
        self, limits: FrameLimits, *, max_in_flight: int = 1, linger_ms: float = 0.0
    ) -> None:
        assert max_in_flight >= 1, "at least one frame may be in flight"
        assert linger_ms >= 0, "a linger is a duration"
        self.limits = limits
        self.max_in_flight = max_in_flight
        self.linger_ms = linger_ms
        self.queued_messages = 0
        # Frames holding queued messages (the one being filled included).
        self.queued_frames = 0
        self.in_flight = 0
        self.frames_sent = 0
        # Frames taken while no other frame was in flight (an idle connection's frames).
        self.frames_sent_idle = 0
        self._frame_messages = 0
        self._frame_bytes = 0
        # Messages in each closed (full) frame, oldest first.
        self._closed_counts: list[int] = []
        self._linger_from_ms: float | None = None

    def add(self, count: int, size_bytes: int) -> bool:
        """Queue `count` messages of `size_bytes` in all; True when the frame being filled could
        not take them: it is closed, and they start the next one (the adapter does the same)."""
        frame_messages = self._frame_messages
        limits = self.limits
        closed = False
        if frame_messages and (
            frame_messages + count > limits.max_messages
            or self._frame_bytes + size_bytes > limits.max_bytes
        ):
            self._closed_counts.append(frame_messages)
            frame_messages = self._frame_bytes = 0
            closed = True
        if not frame_messages:
            self.queued_frames += 1
        self._frame_messages = frame_messages + count
        self._frame_bytes += size_bytes
        self.queued_messages += count
        return closed

    def _frame_full(self) -> bool:
        limits = self.limits
        return bool(self._closed_counts) or (
            self._frame_messages >= limits.max_messages or self._frame_bytes >= limits.max_bytes
        )

    def next_send_ms(self, now_ms: float) -> float | None:
        """When the next frame may be written: `now_ms` (at once), a later time (the linger),
        or None: nothing is queued, or the most frames are in flight and what is queued rides
        the next frame once one completes."""
        if not self.queued_messages or self.in_flight >= self.max_in_flight:
            return None
        if not self.linger_ms or self._frame_full():
            return now_ms
        if self._linger_from_ms is None:
            self._linger_from_ms = now_ms
        return max(now_ms, self._linger_from_ms + self.linger_ms)

    def take_frame(self) -> int:
        """The oldest queued frame is written now: how many messages it holds."""
        assert self.queued_messages, "take_frame with nothing queued"
        if self._closed_counts:
            count = self._closed_counts.pop(0)
        else:
            count = self._frame_messages
            self._frame_messages = 0
            self._frame_bytes = 0
            self._linger_from_ms = None
        self.queued_messages -= count
        self.queued_frames -= 1
        if not self.in_flight:
            self.frames_sent_idle += 1
        self.in_flight += 1
        self.frames_sent += 1
        return count

    def sent(self) -> None:
        """A frame's write completed."""
        assert self.in_flight, "sent() without a frame in flight"
        self.in_flight -= 1

    def clear(self) -> None:
        """Forget everything queued (the connection is gone); frames in flight stay counted."""
        self.queued_messages = self.queued_frames = 0
        self._frame_messages = self._frame_bytes = 0
        self._closed_counts.clear()
        self._linger_from_ms = None


def frame_split(
    items: Sequence[bytes], counts: Sequence[int] | None, limits: FrameLimits
) -> tuple[int, int]:
    """The next frame of what is queued: (items, messages) of the longest prefix within the
    limits, at least one item. `counts` gives the messages in each item (an item may be a chunk
    of several already joined), or None when each item is one message."""
    if counts is None:
        taken = min(len(items), limits.max_messages)
        if sum(map(len, items[:taken])) <= limits.max_bytes:
            return taken, taken  # the usual case: the message bound alone decides
        counts = [1] * taken
    taken = messages = total = 0
    for count, item in zip(counts, items, strict=False):
        size = len(item)
        if taken and (messages + count > limits.max_messages or total + size > limits.max_bytes):
            break
        taken += 1
        messages += count
        total += size
    return taken, messages
