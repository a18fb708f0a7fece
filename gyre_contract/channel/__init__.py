"""The channel: the handoff between a sampler's and a trainer's processes, checked at run time.

`open_sampler(uri, model=...)` and `open_trainer(uri, map=..., trainer=...)` open the two ends
of a channel (`file://DIR` or a plain path; `ray://NAMESPACE/NAME`); the handshake at open
refuses a map that cannot run on the sampler's records before any data moves. `put` writes
validated segments, `get` delivers them as the trainer's own batch, `ack` commits them
(docs/channel.md). `gyre-contract channel status` adds up both ends' counts. Names load on
first use; pyarrow (extra `parquet`) and ray (extra `ray`) only when a channel is opened.
"""

from gyre_contract.core._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "._ends": ("open_sampler", "open_trainer"),
})
