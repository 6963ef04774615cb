"""Who may open a replication link here, decided before the stream reaches a link core. [core]

An incoming stream's first frame is the dialler's Hello. Before that stream may displace a live
link to the same peer (Rule 4 of replication/link_core.py), two checks refuse it:
- `identity`: on amps-replication-secure, the peer's verified certificate must name the
  instance its Hello claims to be (CN or a DNS subject alternative name);
- `unknown_peer`: with an allow list (amps.security.peers), that instance must be on it.
A refusal is answered with the same `Send(Refusal)` and `Close` actions a link core returns,
and kept per peer for the admin view until a stream from that peer is admitted. The peer
chooses the names, so only the newest STRANGERS are kept.
"""

from __future__ import annotations

from collections.abc import Set

from amps.security.peers import PeerAllowList
from replication.frames import Hello, Refusal
from replication.link_core import REFUSALS, Action, Close, Send

STRANGERS = 16


class Admission:
    """The identity and allow-list checks of incoming streams, and their last refusals."""

    def __init__(self, local: str, *, secure: bool, allowed: PeerAllowList | None) -> None:
        self.local = local
        self.secure = secure
        self.allowed = allowed
        # peer -> (code, message) of its last refused stream, oldest first
        self.refused: dict[str, tuple[str, str]] = {}

    def check(self, hello: Hello, peer_names: Set[str]) -> list[Action]:
        """What to do with a stream whose first frame is `hello`: nothing when it may go on to
        the handshake, else refuse it. `peer_names` are the names its certificate carries."""
        problem = self._problem(hello, peer_names)
        self.refused.pop(hello.instance, None)
        if problem is None:
            return []
        code, message = problem
        assert code in REFUSALS, code
        self.refused[hello.instance] = problem
        while len(self.refused) > STRANGERS:
            del self.refused[next(iter(self.refused))]
        return [Send(Refusal(code, message)), Close(message, refused=True, code=code)]

    def _problem(self, hello: Hello, peer_names: Set[str]) -> tuple[str, str] | None:
        if self.secure and hello.instance not in peer_names:
            shown = ", ".join(sorted(peer_names)) or "no name"
            return "identity", (
                f"{self.local} and {hello.instance}: the peer's certificate names {shown}, "
                f"not {hello.instance!r}"
            )
        if self.allowed is not None:
            unknown = self.allowed.refusal(self.local, hello.instance, hello.group)
            if unknown is not None:
                return "unknown_peer", unknown
        return None
