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
    if not _logs_reach_stderr():
        # The log goes elsewhere (or nowhere): the operator at the terminal still sees why.
        print(f"amps: fatal ({reason.name.lower()}): {message}", file=sys.stderr, flush=True)
    logging.shutdown()
    sys.stdout.flush()
    os._exit(int(reason))


def _logs_reach_stderr() -> bool:
    """Whether our CRITICAL line was just written to stderr (printing it would repeat it)."""
    handlers: list[logging.Handler] = []
    logger: logging.Logger | None = log
    while logger is not None:
        handlers.extend(logger.handlers)
        logger = logger.parent if logger.propagate else None
    if not handlers:
        return logging.lastResort is not None  # Python's fallback handler writes to stderr
    return any(
        isinstance(handler, logging.StreamHandler)
        and handler.stream in (sys.stderr, sys.__stderr__)
        and handler.level <= logging.CRITICAL
        for handler in handlers
    )
