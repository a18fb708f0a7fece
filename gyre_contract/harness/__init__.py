"""Running the integration: the recorder, the three stages, the run log (and `RunTimer`
for a loop of your own) and the demo.

Names load on first use (PEP 562): gymnasium and matplotlib only when a function needs them.
"""

from gyre_contract.core._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "._recorder": ("Recorder", "TurnRecorder"),
    "._stages": ("half_way", "full_loop"),
    "._runlog": ("RunLog", "RunTimer"),
})
