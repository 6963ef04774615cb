"""[core] How long a name may be: instances, groups, transports, clients, topics and queues.

Names travel in every journal record (u16 lengths), in log lines and in metrics labels, so each
kind has a bound: a name far past it is a mistake (or an attack), never a real name.
"""

from __future__ import annotations

import re

# Instance, group, transport, destination and client names.
MAX_NAME_LENGTH = 256
# Topics (literal or regex) and queue names, which AMPS builds from topic paths.
MAX_TOPIC_LENGTH = 1024

_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")


def name_problem(text: str, limit: int = MAX_NAME_LENGTH, *, spaces: bool = False) -> str | None:
    """Why `text` is not a usable name (too long, spaces, control characters), or None.

    Client names may hold spaces (clients choose them; AMPS does not forbid them); configured
    names may not.
    """
    if len(text) > limit:
        return f"a name of at most {limit} characters (this one has {len(text)})"
    if not spaces and any(c.isspace() for c in text):
        return "a name without spaces"
    if _CONTROL_CHARACTER.search(text) is not None:
        return "a name without control characters"
    return None
