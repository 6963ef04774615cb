"""What this instance holds from each peer, per origin, over that peer's link (R10). [core]

The receiver's side of resynchronisation: after a broken link each side's `Hello` carries
these positions, and the sender resumes after them. A position lags what is durable (it is
saved after the fact), never leads it: a lagging position only makes the sender resend records
that de-duplication then discards, while a leading one would lose records.
"""

from __future__ import annotations

from collections.abc import Iterable

from replication.frames import OriginPosition


class PositionBook:
    """peer -> origin -> the last record held from that origin over that peer's link."""

    def __init__(self, entries: Iterable[tuple[str, OriginPosition]] = ()) -> None:
        self._by_peer: dict[str, dict[str, OriginPosition]] = {}
        for peer, position in entries:
            self.hold(peer, position)

    def hold(self, peer: str, position: OriginPosition) -> None:
        """Record that `position` (and everything before it over this link) is durable here."""
        by_origin = self._by_peer.setdefault(peer, {})
        current = by_origin.get(position.origin)
        if current is None or position.upstream_txid > current.upstream_txid:
            by_origin[position.origin] = position

    def positions(self, peer: str) -> tuple[OriginPosition, ...]:
        """Every origin's position over `peer`'s link, in origin order for a stable Hello."""
        by_origin = self._by_peer.get(peer, {})
        return tuple(by_origin[origin] for origin in sorted(by_origin))

    def entries(self) -> list[tuple[str, OriginPosition]]:
        """Everything, for saving: (peer, position) pairs."""
        return [(peer, p) for peer in sorted(self._by_peer) for p in self.positions(peer)]

    def through_txid(self, peer: str) -> int:
        """The highest upstream txid held from `peer` (0 when nothing)."""
        return max((p.upstream_txid for p in self.positions(peer)), default=0)
