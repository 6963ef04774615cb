"""[core] Which instances may open a replication link to this one (issue 12, S4).

On `amps-replication-secure` a certificate from the cluster's CA proves who a peer is; this list
says whether that peer belongs here at all. Known peers are this instance's destinations (their
Name, with their Group) and the transport's `AllowedInstance` / `AllowedGroup` entries (for
instances that only send here, such as the sources of an archive). Anyone else is refused at
the handshake, before any record is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from amps.config.model import Config


@dataclass(frozen=True, slots=True)
class PeerAllowList:
    """Instance names (with the Group each must have, None = any) and Groups allowed in."""

    instances: dict[str, str | None]
    groups: frozenset[str]

    @classmethod
    def from_config(cls, config: Config) -> PeerAllowList | None:
        """The list for the incoming replication transport; None when nothing is enforced
        (plaintext replication without AllowedInstance/AllowedGroup entries)."""
        transport = config.replication_transport
        if transport is None:
            return None
        explicit = bool(transport.allowed_instances or transport.allowed_groups)
        if transport.type != "amps-replication-secure" and not explicit:
            return None
        instances: dict[str, str | None] = dict.fromkeys(transport.allowed_instances)
        if config.replication is not None:
            for destination in config.replication.destinations:
                instances.setdefault(destination.name, destination.group)
        return cls(instances, frozenset(transport.allowed_groups))

    def refusal(self, local: str, instance: str, group: str) -> str | None:
        """Why `instance` of `group` may not link to `local`, or None when it may."""
        if instance in self.instances:
            expected = self.instances[instance]
            if expected is None or expected == group or group in self.groups:
                return None
            return (
                f"{local} does not know {instance} in group {group!r}: its destination "
                f"{instance} is in group {expected!r}"
            )
        if group in self.groups:
            return None
        known = ", ".join(sorted(self.instances)) or "none"
        groups = ", ".join(sorted(self.groups)) or "none"
        return (
            f"{local} does not know instance {instance!r} (group {group!r}): known instances "
            f"{known}, groups {groups} (a Replication/Destination, or AllowedInstance / "
            f"AllowedGroup on the amps-replication-secure transport)"
        )
