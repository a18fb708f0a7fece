"""The channel: the handoff between a sampler's and a trainer's processes, checked at run time.

`open_sampler(uri, model=...)` and `open_trainer(uri, map=..., trainer=...)` open the two ends
of a channel (`file://DIR` or a plain path; `ray://NAMESPACE/NAME`); the handshake at open
refuses a map that cannot run on the sampler's records before any data moves. `put` writes
validated segments, `get` delivers them as the trainer's own batch, `ack` commits them
(docs/channel.md). `channel_status(uri)` adds up both ends' counts (`gyre-contract channel
status`). Names load on first use; pyarrow (extra `parquet`) and ray (extra `ray`) only when a
channel is opened.
"""

from gyre_contract.core.deprecation import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".ends": ("open_sampler", "open_trainer", "SamplerEnd", "TrainerEnd", "Delivery",
              "EndCounts", "ChannelWarning"),
    ".handshake": ("HandshakeError", "NotAChannelError"),
    ".segments": ("SegmentMeta", "SegmentError"),
    ".status": ("channel_status", "ChannelStatus"),
})
