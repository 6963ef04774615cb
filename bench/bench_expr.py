"""Expression engine throughput: the five-predicate filter of AMPS-EXPRESSIONS.md §8 on ~1 KB JSON.

Run with `.venv/bin/python -m bench.bench_expr`. Prints figures; asserts nothing.

The compiled filter over bytes parses with the engine's backend (pysimdjson lazy proxies, first
key wins; docs/reference/expressions.md, "Parse backend"). Further rows give the standard-library
backend the engine uses without pysimdjson or for bodies simdjson refuses, and the hand-written
predicate over orjson and over simdjson proxies for comparison.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

import orjson

from amps.expr import Message, compile_filter, jsondoc

FILTER = (
    "/price > 100 AND /qty >= 100 AND /side = 'buy' AND /region IN ('NYC','LDN') "
    "AND /symbol != 'MSFT'"
)
DOCUMENTS = 2000
ROUNDS = 15


def hand_written(d: Mapping[str, object]) -> bool:
    """The same predicate as a Python programmer would write it for these documents."""
    return (
        d["price"] > 100  # type: ignore[operator]
        and d["qty"] >= 100  # type: ignore[operator]
        and d["side"] == "buy"
        and d["region"] in ("NYC", "LDN")
        and d["symbol"] != "MSFT"
    )


def make_document(rng: random.Random) -> bytes:
    doc: dict[str, object] = {
        "symbol": rng.choice(["MSFT", "IBM", "AAPL", "GOOG", "ORCL"]),
        "price": round(rng.uniform(50, 150), 2),
        "qty": rng.randrange(0, 300),
        "side": rng.choice(["buy", "sell"]),
        "region": rng.choice(["NYC", "LDN", "TKY", "HKG"]),
        "trader": f"trader-{rng.randrange(1000):04d}",
    }
    # Padding fields after the ones the filter reads bring each document to about 1 KB.
    for index in range(24):
        doc[f"field_{index:02d}"] = "".join(rng.choice("abcdefghij") for _ in range(24))
    return orjson.dumps(doc)


def best_rates(runs: list[Callable[[], object]], count: int) -> list[float]:
    """Best of ROUNDS for each run; rounds are interleaved so a noisy neighbour hits all alike."""
    best = [float("inf")] * len(runs)
    for _ in range(ROUNDS):
        for index, run in enumerate(runs):
            start = time.perf_counter()
            run()
            best[index] = min(best[index], time.perf_counter() - start)
    return [count / seconds for seconds in best]


def main() -> None:
    rng = random.Random(7)
    payloads = [make_document(rng) for _ in range(DOCUMENTS)]
    parsed = [orjson.loads(p) for p in payloads]
    messages = [Message.from_obj(d) for d in parsed]
    flt = compile_filter(FILTER)
    matches = flt.matches
    assert [matches(m) for m in messages] == [hand_written(d) for d in parsed]

    compiled_parsed, hand_parsed = best_rates(
        [lambda: [matches(m) for m in messages], lambda: [hand_written(d) for d in parsed]],
        DOCUMENTS,
    )
    compiled_bytes, hand_bytes, parse_only = best_rates(
        [
            lambda: [matches(Message(p)) for p in payloads],
            lambda: [hand_written(orjson.loads(p)) for p in payloads],
            lambda: [orjson.loads(p) for p in payloads],
        ],
        DOCUMENTS,
    )

    size = sum(map(len, payloads)) / len(payloads)
    matched = sum(hand_written(d) for d in parsed)
    print(f"filter: {FILTER}")
    print(f"documents: {DOCUMENTS}, mean size {size:.0f} bytes, {matched} match")
    print(f"{'':32}{'compiled':>14}{'hand lambda':>14}{'ratio':>8}")
    print(
        f"{'parsed documents (evals/s)':32}{compiled_parsed:>14,.0f}{hand_parsed:>14,.0f}"
        f"{compiled_parsed / hand_parsed:>8.2f}"
    )
    print(
        f"{'including JSON parse (evals/s)':32}{compiled_bytes:>14,.0f}{hand_bytes:>14,.0f}"
        f"{compiled_bytes / hand_bytes:>8.2f}"
    )
    print(f"{'orjson.loads alone (docs/s)':32}{parse_only:>14,.0f}")
    print(f"backend: {jsondoc.backend()}")
    if not jsondoc.AVAILABLE:
        print("pysimdjson not installed: backend rows skipped")
        return
    # Measured side by side so that the ratios share the same noise.
    lazy, lazy_parse, hand_lazy, hand_orjson = best_rates(
        [
            lambda: [matches(Message(p)) for p in payloads],
            lambda: [jsondoc.parse_document(p) is None for p in payloads],
            lambda: [hand_written(jsondoc.parse_document(p)) for p in payloads],
            lambda: [hand_written(orjson.loads(p)) for p in payloads],
        ],
        DOCUMENTS,
    )
    jsondoc.use_simdjson(False)
    try:
        (fallback,) = best_rates([lambda: [matches(Message(p)) for p in payloads]], DOCUMENTS)
    finally:
        jsondoc.use_simdjson(True)
    print("including the parse, relative to the hand lambda over orjson.loads (evals/s):")
    for name, rate in [
        ("  hand lambda, orjson.loads", hand_orjson),
        ("  hand lambda, simdjson proxies", hand_lazy),
        ("  compiled, simdjson (default)", lazy),
        ("  compiled, stdlib fallback", fallback),
    ]:
        print(f"{name:32}{rate:>14,.0f}{'':14}{rate / hand_orjson:>8.2f}")
    print(f"{'simdjson parse alone (docs/s)':32}{lazy_parse:>14,.0f}")


if __name__ == "__main__":
    main()
