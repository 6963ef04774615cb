"""The `amps` command line."""
