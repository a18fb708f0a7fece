"""`python -m gyre_contract` runs the CLI."""

from gyre_contract.cli import main

main()
