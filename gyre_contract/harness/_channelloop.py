"""Stage 3 through a channel: what `full_loop(channel=...)` does between sampling and training.

With a `sample_fn`, each cycle's steps are put into the channel by a sampler end and taken out
by a trainer end, in one process (the channel's file or Ray backend in between, exactly as two
processes would use it). Without one, another process (or machine) is the sampler and the loop
is the trainer's: each cycle waits for `rows` steps. Either way the trainer's batch is what the
channel delivers (the trainer's own keys), stale rows are refused (`on_stale="error"`: the
loop's `max_staleness` check), the delivery is acked after the update and the new version is
published (`set_version`), and both ends' counts go into the run log's metrics per cycle
(`channel.sampler.*`, `channel.trainer.*`) and must agree at the end.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from gyre_contract.channel._ends import Delivery, SamplerEnd, TrainerEnd, open_sampler, open_trainer
from gyre_contract.channel._segments import SegmentMeta
from gyre_contract.core._errors import ContractError, Problem

CHANNEL_CHECKS = (
    "every cycle's delivery holds the steps and episodes put for it (whole segments)",
    "the sampler's and the trainer's counts agree: steps put = steps acked + dropped",
)
"""What `full_loop` checks besides its own when it runs through a channel."""


@dataclass
class ChannelLeg:
    """The two ends `full_loop` uses (the sampler's only when it samples itself)."""

    trainer: TrainerEnd
    sampler: SamplerEnd | None
    timeout: float | None
    sent: SegmentMeta | None = None

    @classmethod
    def open(cls, channel: Any, field_map: Any, trainer: Any, batch_dims: Any, model: Any,
             *, sampling: bool, timeout: float | None) -> ChannelLeg:
        """Open the channel `channel` (a URI, or a `TrainerEnd` already open) for the loop."""
        if isinstance(channel, TrainerEnd):
            end = channel
        else:
            if trainer is not None and not isinstance(trainer, (str, os.PathLike, dict)) \
                    and not isinstance(trainer, type):
                raise ValueError("through a channel, give trainer= as a JSON Schema path or "
                                 "dict (the trainer end publishes it)")
            end = open_trainer(channel, map=field_map, trainer=trainer, batch_dims=batch_dims)
        sampler = open_sampler(end.uri, model=model) if sampling else None
        return cls(end, sampler, timeout)

    def put(self, items: list[Any], cycle: int) -> SegmentMeta:
        """The cycle's steps (step records) into the channel as one segment."""
        assert self.sampler is not None
        if not items:
            raise ContractError(Problem(f"cycles[{cycle}].sample", "at least one step", "none",
                                        "sample_fn returned no steps"))
        try:
            self.sent = self.sampler.put(items)
        except ContractError as err:
            raise err.under(f"cycles[{cycle}]") from None
        return self.sent

    def take(self, rows: int, version: int, max_staleness: int, cycle: int) -> Delivery:
        """The next delivery of at least `rows` steps, none older than `max_staleness`."""
        try:
            return self.trainer.get(rows=rows, current_version=version,
                                    max_staleness=max_staleness, timeout=self.timeout,
                                    on_stale="error")
        except ContractError as err:
            raise err.under(f"cycles[{cycle}]") from None

    def check(self, delivery: Delivery, cycle: int) -> None:
        """The delivery holds what was put for this cycle (when this loop put it)."""
        sent = self.sent
        if sent is None:
            return
        problems = []
        if sent.segment not in delivery.segments or delivery.steps != sent.steps:
            problems.append(Problem(f"cycles[{cycle}].channel", f"segment {sent.segment} "
                                    f"({sent.steps} steps)", f"segments "
                                    f"{list(delivery.segments)} ({delivery.steps} steps)",
                                    "the delivery differs from what was put"))
        if delivery.episodes != sent.episodes:
            problems.append(Problem(f"cycles[{cycle}].episode_id", f"the {sent.episodes} "
                                    f"episodes put", str(delivery.episodes),
                                    "episodes in the batch differ from the episodes put"))
        if problems:
            raise ContractError(problems)

    def commit(self, delivery: Delivery, version: int) -> None:
        """The update is done: ack the delivery and publish the new version."""
        self.trainer.ack(delivery)
        self.trainer.set_version(version)

    def metrics(self) -> dict[str, int]:
        """Both ends' counts so far, as run-log metrics."""
        out = {f"channel.trainer.{k}": v for k, v in self.trainer.counts.to_dict().items()}
        if self.sampler is not None:
            out.update({f"channel.sampler.{k}": v for k, v in
                        self.sampler.counts.to_dict().items()
                        if k in ("segments", "steps", "episodes")})
        return out

    def check_counts(self) -> None:
        """Both ends agree: every step put was acked or dropped (when this loop put them)."""
        if self.sampler is None:
            return
        put, t = self.sampler.counts, self.trainer.counts
        if put.steps != t.acked_steps + t.dropped_steps or put.segments != t.acked_segments:
            raise ContractError(Problem(
                "channel", f"{put.steps} steps in {put.segments} segments (put)",
                f"{t.acked_steps} acked + {t.dropped_steps} dropped in {t.acked_segments} "
                f"segments", "the sampler's and the trainer's counts disagree"))

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()


def batch_shape(delivery: Delivery) -> tuple[int, int]:
    """The leading two dims of the delivered batch (a one-dim batch: its rows and 1)."""
    arrays = [np.asarray(v) for v in delivery.batch.values()]
    wide = [a for a in arrays if a.ndim >= 2]
    if wide:
        return int(wide[0].shape[0]), int(wide[0].shape[1])
    return (int(arrays[0].shape[0]) if arrays and arrays[0].ndim else 0), 1
