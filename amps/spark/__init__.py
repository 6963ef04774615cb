"""The bridge to Spark (issue 10, D6): the `amps` data source and sink, and the queue report.

Needs the `spark` extra (`pip install 'amps[spark]'`); `require_spark()` says so plainly.
"""

from __future__ import annotations

import importlib.util

INSTALL_HINT = "pip install 'amps[spark]'"


def require_spark() -> None:
    """Raise ImportError naming the install command when pyspark or pyarrow is missing."""
    missing = [name for name in ("pyspark", "pyarrow") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"the amps Spark source needs {' and '.join(missing)}: {INSTALL_HINT}")
