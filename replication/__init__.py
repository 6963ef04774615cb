"""Replication between instances: links, routing, ownership transfer (a later issue)."""
