"""`gyre-contract demo --llm --procs`: stage 3 of the LLM demo with the sampler in its own OS process.

The demo's process is the trainer; for each seed it starts the sampler as a second process
(`multiprocessing`, spawn) and they meet only through a channel in the demo's folder
(`channel-seed{S}/`) and the weights the trainer publishes by version (`weights-seed{S}/v{K}.npy`,
each written atomically before `set_version(K)`). The sampler samples batch `i` with the
weights of version `max(0, i - 1)` — one version ahead, as `demo --llm` does in one process —
waiting until the trainer has published that version, and puts each batch with its mean reward
as the segment's note. The trainer runs `full_loop(None, ..., channel=...)`: each cycle takes
one batch (128 generations), refuses rows more than one version old, trains, acks, and
publishes the next weights. Same seeds, same batches, same weights: the same learning curve,
staleness and accuracies as `demo --llm`, with both ends' counts in the run log.
"""

from __future__ import annotations

import io
import multiprocessing
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract.channel._ends import open_sampler, open_trainer
from gyre_contract.channel._status import channel_status
from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.harness._demoreport import Say
from gyre_contract.harness._llmdemo import (
    GROUP_SIZE,
    PROMPTS_PER_BATCH,
    AdditionStep,
    GroupSampler,
    LLMDemoResult,
    finish_run,
    grpo_metrics,
    run_config,
)
from gyre_contract.harness._runlog import RunLog
from gyre_contract.harness._stages import full_loop
from gyre_contract.harness._tokenpolicy import AdditionTask, TokenPolicy
from gyre_contract.io._atomic import write_bytes_atomic

WAIT_SECONDS = 120.0
"""How long either process waits for the other (a batch, a version) before it gives up."""
HOW = " (sampler and trainer in two OS processes, through a channel)"


def weights_path(folder: Path, version: int) -> Path:
    return folder / f"v{version}.npy"


def publish_weights(folder: Path, version: int, weights: np.ndarray) -> None:
    """The weights of `version`, written atomically (the sampler never reads half a file)."""
    buffer = io.BytesIO()
    np.save(buffer, weights, allow_pickle=False)
    write_bytes_atomic(weights_path(folder, version), buffer.getvalue())


def sampler_process(uri: str, weights: str, seed: int, cycles: int) -> None:
    """The sampler's process (module doc): `cycles` batches, one version ahead."""
    policy = TokenPolicy(seed=seed)  # its reference (the initial weights) is the trainer's too
    sampler = GroupSampler(policy, AdditionTask(), seed=seed, run_id=f"seed{seed}")
    end = open_sampler(uri, model=AdditionStep, max_pending=2, timeout=WAIT_SECONDS)
    for index in range(cycles):
        version = max(0, index - 1)
        deadline = time.monotonic() + WAIT_SECONDS
        while (end.trainer_version if end.trainer_version is not None else -1) < version:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the trainer did not publish version {version} within "
                                   f"{WAIT_SECONDS} s")
            time.sleep(0.005)
        loaded = np.load(weights_path(Path(weights), version), allow_pickle=False)
        records = sampler.sample(version, loaded, index)
        end.put(records, note={"mean_reward": sampler.rewards[-1], "exact": sampler.exact[-1]})
    end.close()


def train_run_procs(say: Say, result: LLMDemoResult, task: AdditionTask, map_path: Path,
                    trainer_path: Path, cycles: int, run_seed: int, log: RunLog,
                    notes: str) -> list[float] | None:
    """One seed of stage 3 with the sampler in its own process (a `llmdemo.TrainRun`)."""
    policy = TokenPolicy(seed=run_seed)
    accuracy_before = policy.greedy_accuracy(task)
    channel, weights = (log.path.parent / f"{name}-seed{run_seed}"
                        for name in ("channel", "weights"))
    for folder in (channel, weights):
        shutil.rmtree(folder, ignore_errors=True)  # a run before in this folder
    weights.mkdir(parents=True)
    trainer = open_trainer(channel, map=map_path, trainer=trainer_path)
    publish_weights(weights, 0, policy.weights)
    trainer.set_version(0)
    process = multiprocessing.get_context("spawn").Process(
        target=sampler_process, args=(str(channel), str(weights), run_seed, cycles),
        name=f"gyre-llm-sampler-seed{run_seed}", daemon=True)
    process.start()
    say(f"\nseed {run_seed}: a fresh policy, {cycles} updates; the sampler is process "
        f"{process.pid}, the batches go through {channel}")
    curve: list[float] = []

    def train_step(batch: Mapping[str, Any]) -> dict[str, float]:
        note = trainer.last.notes[0] if trainer.last is not None else {}
        curve.append(float(note["mean_reward"]))
        metrics = grpo_metrics(policy, batch, curve[-1], float(note["exact"]))
        publish_weights(weights, policy.version, policy.weights)  # before set_version
        return metrics

    try:
        report = full_loop(None, train_step, map_path, cycles, max_staleness=1,
                           channel=trainer, rows=PROMPTS_PER_BATCH * GROUP_SIZE,
                           channel_timeout=WAIT_SECONDS, run_id=f"llm-demo-seed{run_seed}",
                           config=run_config(policy, cycles, sampler="process"),
                           run_log=log, notes=notes, model=AdditionStep)
    except (ContractError, TimeoutError) as err:
        process.join(timeout=1)
        if process.is_alive():
            process.terminate()
        why = f"{err}" + ("" if process.exitcode in (0, None) else
                          f" (the sampler process exited with code {process.exitcode})")
        say(why)
        result.failed("stage 3", err if isinstance(err, ContractError) else ContractError(
            Problem("stage 3.channel", "a batch from the sampler process", "none", why)))
        say.verdict(False, "the loop broke the contract")
        return None
    process.join(timeout=WAIT_SECONDS)
    status = channel_status(channel)
    say(f"channel status: {status.put['segments']} segments, {status.put['steps']} steps put; "
        f"{status.acked['steps']} acked, {status.pending['steps']} pending, "
        f"{status.dropped['steps']} dropped as stale; "
        + ("the two ends' counts agree" if status.ok else "; ".join(status.problems)))
    if not status.ok or process.exitcode != 0:
        result.failed("stage 3", ContractError(Problem(
            "stage 3.channel", "both ends' counts agree, the sampler process exits 0",
            f"{status.problems}, exit code {process.exitcode}", "the channel disagrees")))
        say.verdict(False, "the two processes disagree")
        return None
    staleness = [max(c.staleness) for c in report.cycles]
    return finish_run(say, result, report, curve, staleness, accuracy_before, policy, task,
                      run_seed)
