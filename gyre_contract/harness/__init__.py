"""Running the integration: the recorder, the three stages, the run log and the demo.

Names load on first use (PEP 562): gymnasium and matplotlib only when a function needs them.
"""

from gyre_contract.core.deprecation import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".recorder": ("Recorder", "TurnRecorder", "episodes_from_records"),
    ".stages": ("half_way", "full_loop", "HalfWayReport", "LoopReport", "CycleReport",
                "BatchReport"),
    ".runlog": ("RunLog", "RunRecord", "RunTimer", "RunsReport", "summarize", "format_summary"),
    ".runplot": ("plot_runs",),
    ".demo": ("run_demo",),
    ".llmdemo": ("run_llm_demo",),
})
