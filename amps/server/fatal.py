"""The single exit for fatal environment conditions, each with its own exit status."""

from __future__ import annotations

import enum
import logging
import os
import sys
from typing import NoReturn

log = logging.getLogger("amps.server")


class FatalReason(enum.IntEnum):
    """Why an instance stopped on its own; each has its own exit status (sysexits.h)."""

    CONFIG_INVALID = 78  # EX_CONFIG
    JOURNAL_CORRUPT = 65  # EX_DATAERR
    JOURNAL_IO = 74  # EX_IOERR
    ADDRESS_IN_USE = 69  # EX_UNAVAILABLE
    INTERNAL = 70  # EX_SOFTWARE


def fatal(reason: FatalReason, message: str) -> NoReturn:
    """Log one precise line and exit with the reason's status."""
    log.critical("fatal (%s): %s", reason.name.lower(), message)
    print(f"amps: fatal ({reason.name.lower()}): {message}", file=sys.stderr, flush=True)
    logging.shutdown()
    sys.stdout.flush()
    os._exit(int(reason))
