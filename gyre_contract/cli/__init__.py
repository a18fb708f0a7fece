"""`gyre-contract`: the command line, a thin argparse shell over library functions that return
exit codes (0 the contract holds, 1 it is violated, 2 unusable input or usage, 130 interrupted).

`main` is the console script; the commands live in private modules (`_validate.py`, ...).
"""

from gyre_contract.cli._app import main

__all__ = ["main"]
