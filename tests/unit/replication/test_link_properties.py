"""Hypothesis: link cores through random cuts, reconnects and restarts converge (R9, R10).

Every instance must end with exactly the publishes of every origin, each once, in origin order,
whatever happened on the way (mesh with and without passthrough, and a line).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from .sim import LIMITS, Network, check_converged, line, mesh

NAMES = ["a", "b", "c"]

step = st.one_of(
    st.tuples(st.just("publish"), st.sampled_from(NAMES), st.integers(1, 4)),
    st.tuples(st.just("flush"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("deliver"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("connect"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("cut"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("restart"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("save"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("tick"), st.just(""), st.integers(1, 20_000)),
    st.tuples(st.just("heal"), st.just(""), st.just(0)),
    st.tuples(st.just("drain"), st.just(""), st.just(0)),
)


def run(network: Network, steps: list[tuple[str, str, object]]) -> None:
    linked = set(network.pairs())
    for op, name, arg in steps:
        if name and name not in network.instances:
            continue
        instance = network.instances.get(name)
        if op == "publish" and instance is not None:
            for _ in range(int(arg)):  # type: ignore[call-overload]
                instance.publish()
        elif op == "flush":
            network.flush(name)
        elif op in ("deliver", "connect", "cut") and isinstance(arg, str):
            a, b = sorted((name, arg))
            if (a, b) not in linked:
                continue
            if op == "deliver":
                network.deliver(name, arg)
            elif op == "connect":
                network.connect(a, b)
            else:
                network.cut(a, b)
        elif op == "restart":
            network.restart(name)
        elif op == "save" and instance is not None:
            instance.save_book()
        elif op == "heal":
            network.settle()  # so that later cuts and restarts hit links with positions held
        elif op == "drain":
            while any(network.deliver(a, b) for a, b in list(network.streams)):
                pass
        elif op == "tick":
            network.now_ms += int(arg)  # type: ignore[call-overload]
            for instance in network.instances.values():
                for peer, link in instance.links.items():
                    network._run(instance.name, peer, link.on_deadline(network.now_ms))
    network.settle()
    check_converged(network)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(step, max_size=60),
    st.sampled_from(["pair", "mesh", "mesh-direct", "mesh-async", "line"]),
)
def test_every_instance_ends_with_every_origins_records_in_order(
    steps: list[tuple[str, str, object]], topology: str
) -> None:
    if topology == "pair":
        network = mesh(["a", "b"])
    elif topology == "mesh":
        network = mesh(NAMES)
    elif topology == "mesh-direct":
        network = mesh(NAMES, pass_through=None)
    elif topology == "mesh-async":  # acks conflated (Rule 5): a window they do not fill at once
        network = mesh(NAMES, sync=False, limits=replace(LIMITS, window_batches=8))
    else:
        network = line(NAMES)
    run(network, steps)
