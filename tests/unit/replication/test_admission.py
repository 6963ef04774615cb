"""Who may open a replication link, decided before the handshake reaches a link core: the
`identity` and `unknown_peer` refusals and what the admin view keeps of them (issue 8, R8)."""

from __future__ import annotations

from amps.security.peers import PeerAllowList
from replication.admission import STRANGERS, Admission
from replication.frames import PROTOCOL_VERSION, Hello, Refusal
from replication.link_core import REFUSALS, Close, Send
from replication.routing import NO_DIGEST


def hello(instance: str, group: str | None = None) -> Hello:
    return Hello(PROTOCOL_VERSION, instance, group or instance, "b", "b", NO_DIGEST)


def allow(*instances: str, groups: tuple[str, ...] = ()) -> PeerAllowList:
    return PeerAllowList(dict.fromkeys(instances), frozenset(groups))


def test_plaintext_without_an_allow_list_admits_anyone() -> None:
    admission = Admission("b", secure=False, allowed=None)
    assert admission.check(hello("a"), set()) == []
    assert admission.refused == {}


def test_a_certificate_naming_another_instance_is_refused_as_identity() -> None:
    admission = Admission("b", secure=True, allowed=allow("a"))
    actions = admission.check(hello("a"), {"x", "localhost"})
    message = "b and a: the peer's certificate names localhost, x, not 'a'"
    assert actions == [
        Send(Refusal("identity", message)),
        Close(message, refused=True, code="identity"),
    ]
    assert admission.refused == {"a": ("identity", message)}


def test_a_certificate_with_no_name_says_so() -> None:
    admission = Admission("b", secure=True, allowed=allow("a"))
    (send, _close) = admission.check(hello("a"), set())
    assert isinstance(send, Send)
    assert isinstance(send.frame, Refusal)
    assert send.frame.message.endswith("names no name, not 'a'")


def test_an_instance_not_on_the_allow_list_is_refused_as_unknown_peer() -> None:
    admission = Admission("b", secure=True, allowed=allow("c", groups=("other",)))
    actions = admission.check(hello("a"), {"a"})
    assert [type(a) for a in actions] == [Send, Close]
    close = actions[1]
    assert isinstance(close, Close)
    assert close.code == "unknown_peer"
    assert close.reason.startswith("b does not know instance 'a' (group 'a')")
    assert admission.refused["a"][0] == "unknown_peer"


def test_the_identity_check_comes_first_and_every_code_is_documented() -> None:
    admission = Admission("b", secure=True, allowed=allow())
    close = admission.check(hello("a"), {"x"})[1]
    assert isinstance(close, Close)
    assert close.code == "identity"
    assert {"identity", "unknown_peer"} <= set(REFUSALS)


def test_an_admitted_stream_forgets_the_peer_s_last_refusal() -> None:
    admission = Admission("b", secure=True, allowed=allow("a"))
    admission.check(hello("a"), {"x"})
    assert admission.check(hello("a"), {"a"}) == []
    assert admission.refused == {}


def test_refusals_are_kept_for_the_newest_strangers_only() -> None:
    """Names come from the peer: the table stays bounded however many it makes up."""
    admission = Admission("b", secure=True, allowed=allow())
    for n in range(STRANGERS + 5):
        admission.check(hello(f"p{n}"), {f"p{n}"})
    assert len(admission.refused) == STRANGERS
    assert "p0" not in admission.refused
    assert f"p{STRANGERS + 4}" in admission.refused
    # a repeated refusal moves its peer to the newest end
    admission.check(hello("p5"), {"p5"})
    admission.check(hello("new"), {"new"})
    assert "p5" in admission.refused
