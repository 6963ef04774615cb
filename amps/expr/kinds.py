"""Where an expression is used (its own module so that importing `amps.expr` stays cheap)."""

from __future__ import annotations

import enum


class ExprKind(enum.Enum):
    """Where an expression is used; each place allows a different set of functions."""

    FILTER = "filter"  # subscription / sow filter
    QUEUE_FILTER = "queue-filter"  # queue <Filter> (config)
    PRIORITY = "priority"  # queue <Priority> (config, SPEC A2)
    BARRIER = "barrier"  # queue <BarrierExpression> (config, SPEC A3)
    SOW_DELETE_FILTER = "sow-delete-filter"  # sow_delete by filter (SPEC Q10)
