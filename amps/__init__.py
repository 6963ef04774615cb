"""An open-source broker with AMPS-style durable topics and queues."""

from amps.errors import AmpsError

__all__ = ["AmpsError"]
__version__ = "0.1.0"
