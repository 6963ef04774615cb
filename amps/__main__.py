"""`python -m amps` is the `amps` command."""

from amps.cli.main import main

main()
