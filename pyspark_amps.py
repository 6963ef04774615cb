"""Spark's automatic registration of the `amps` data source (a top-level `pyspark_*` module)."""

from amps.spark.source import AmpsDataSource as DefaultSource

__all__ = ["DefaultSource"]
