"""Test support: real instance processes on loopback with free ports."""
