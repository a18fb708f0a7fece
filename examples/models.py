"""The pinned example models: see `gyre_contract/pinned.py` for their definitions.

They live in the package so the CLI and the demo can use them from anywhere
(`--model gyre_contract.pinned:CartPoleStep`); this file keeps the examples folder's imports short.
"""

from gyre_contract.pinned import CartPoleBatch, CartPoleStep, LLMStep

__all__ = ["CartPoleBatch", "CartPoleStep", "LLMStep"]
