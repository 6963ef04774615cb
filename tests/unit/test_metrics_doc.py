"""docs/reference/metrics.md is generated from amps/metrics.py and must be current."""

from __future__ import annotations

from amps.metrics import all_metrics
from amps.tools.metricsdoc import DEFAULT_OUTPUT, main, render


def test_committed_metrics_page_is_current() -> None:
    """Run `python -m amps.tools.metricsdoc` after changing amps/metrics.py."""
    assert DEFAULT_OUTPUT.read_text() == render()
    assert main(["--check", str(DEFAULT_OUTPUT)]) == 0


def test_every_metric_is_documented_once_with_conventional_names() -> None:
    specs = all_metrics()
    names = [s.exposed for s in specs]
    assert len(names) == len(set(names))
    page = render()
    for spec in specs:
        assert f"`{spec.exposed}`" in page
        assert spec.name.startswith("amps_")
        assert not spec.name.endswith("_total"), "counters get _total when exposed"
        assert "node" in spec.labels
        if spec.name.startswith("amps_queue_"):
            assert "queue" in spec.labels
