"""`gyre-contract demo --llm`: the whole left-to-right path for LLM online RL, in numpy.

The sampler is a tiny token policy (`tokenpolicy.TokenPolicy`) answering `a+b=` prompts; the
reward is verifiable (the sum, exactly). Stage 1 samples groups of completions per prompt with
per-token log-probs under the policy and under the frozen reference (the initial policy),
records them with `TurnRecorder` and validates the file. The diff compares the sampler's
schema with a verl-style trainer schema and writes the field map (one row per generation,
group-normalised advantages). Stage 2 builds the trainer's batch through that map and evaluates
the GRPO loss once, with no update. Stage 3 trains with GRPO for a few dozen updates per seed,
sampling asynchronously one version ahead: while the trainer updates version v, the sampler
generates the next batch with the weights of v (so the trainer, at v+1, trains on rows of
version v), with `max_staleness=1` checked every cycle.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TextIO

import numpy as np

from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.core._tensor import Tensor
from gyre_contract.harness._channelloop import CHANNEL_CHECKS
from gyre_contract.harness._demoreport import (
    DemoReport,
    Say,
    compact_table,
    cycle_rows,
    first_last,
    plot_curves,
    timed,
)
from gyre_contract.harness._recorder import TurnRecorder
from gyre_contract.harness._runlog import RunLog
from gyre_contract.harness._stages import FULL_LOOP_CHECKS, full_loop, half_way
from gyre_contract.harness._tokenpolicy import (
    MAX_NEW_TOKENS,
    VOCAB,
    AdditionTask,
    TokenPolicy,
    decode,
)
from gyre_contract.io import validate_file, write_steps
from gyre_contract.io._atomic import write_text_atomic
from gyre_contract.pinned import LLMStep
from gyre_contract.schema import diff, json_schema
from gyre_contract.trainer import FieldMap
from gyre_contract.trainer._layouts import TokenRows


class AdditionStep(LLMStep):
    """The demo sampler's step: an `LLMStep` whose v1.1 fields are all recorded (required)."""

    ref_logprob: Annotated[np.ndarray, Tensor(
        "float32", ["A"], role="ref_logprob",
        description="per-token log-probs under the frozen reference policy")]
    group_id: Annotated[str, Tensor(
        "string", [], role="group_id", description="the prompt's group: its completions share it")]
    loss_mask: Annotated[np.ndarray, Tensor(
        "bool", ["A"], role="loss_mask",
        description="True on tokens the policy generated (all of them here)")]
    logprob: Annotated[np.ndarray, Tensor(
        "float32", ["A"], role="logprob", description="per-token log-probs under policy_version")]


GROUP_SIZE = 8
"""Completions per prompt (GRPO's group)."""
PROMPTS_PER_BATCH = 16
EPS = 1e-6
"""group_norm's eps (verl's default)."""
STAGE3_SEEDS = 3


def verl_actor_schema() -> dict[str, Any]:
    """A verl-style actor-update batch, one row per generation: the trainer side of the diff.

    Key names, dtypes and shapes as verl's `DataProto` holds them for a GRPO actor update
    with the KL loss (`use_kl_loss`): `prompts` left-padded, `responses` right-padded with their
    `response_mask`, the rollout's log-probs (`old_log_probs`), the reference's
    (`ref_log_prob`), per-token `advantages`, the prompt group `uid`, and a per-token `kl`
    of the sampler to the reference that the trainer logs.
    """
    def tensor(dtype: str, shape: list[str], role: str | None, description: str
               ) -> dict[str, Any]:
        json_type = {"int64": "integer", "float32": "number", "bool": "boolean",
                     "string": "string"}[dtype]
        items: dict[str, Any] = {"type": json_type}
        for _ in shape:
            items = {"type": "array", "items": items}
        field = {**items, "description": description, "x-gyre-dtype": dtype,
                 "x-gyre-shape": shape}
        return field if role is None else {**field, "x-gyre-role": role}

    properties = {
        "prompts": tensor("int64", ["B", "P"], "observation", "prompt token ids, left-padded"),
        "responses": tensor("int64", ["B", "R"], "action",
                            "generated token ids, right-padded"),
        "response_mask": tensor("bool", ["B", "R"], "mask",
                                "True on real generated tokens the loss counts"),
        "old_log_probs": tensor("float32", ["B", "R"], "logprob",
                                "per-token log-probs of the policy that sampled"),
        "ref_log_prob": tensor("float32", ["B", "R"], "ref_logprob",
                               "per-token log-probs of the frozen reference (KL)"),
        "advantages": tensor("float32", ["B", "R"], "advantage",
                             "GRPO: the score normalised within its prompt group, per token"),
        "uid": tensor("string", ["B"], "group_id", "prompt group id"),
        "kl": tensor("float32", ["B", "R"], None,
                     "per-token KL estimate of the sampling policy to the reference (logged "
                     "per batch; the loss computes its own against the current weights)"),
    }
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "verl-style GRPO actor batch",
            "description": "One row per generation; [B, R] token tensors (response positions).",
            "x-gyre-batch-dims": ["B"], "type": "object", "properties": properties,
            "required": list(properties)}


# -- the sampler ---------------------------------------------------------------------------

@dataclass
class GroupSampler:
    """Samples `prompts` prompts x `group` completions with given weights and records them.

    Batch `index` draws from its own generator seeded by (seed, index), so what a batch holds
    depends only on the seed, its index and the weights it was sampled with, never on timing.
    """

    policy: TokenPolicy
    task: AdditionTask
    seed: int
    run_id: str
    prompts: int = PROMPTS_PER_BATCH
    group: int = GROUP_SIZE
    model: type = AdditionStep
    rewards: list[float] = field(default_factory=list)
    exact: list[float] = field(default_factory=list)
    _version: int = 0
    _recorder: TurnRecorder = field(init=False)

    def __post_init__(self) -> None:
        self._recorder = TurnRecorder(policy_version=lambda: self._version, run_id=self.run_id,
                                      model=self.model)

    def sample(self, version: int, weights: np.ndarray, index: int) -> list[dict[str, Any]]:
        """One batch of step records (group after group), sampled with `weights` of `version`."""
        rng = np.random.default_rng([self.seed, index])
        problems = np.asarray(self.task.problems())
        picked = problems[rng.choice(len(problems), self.prompts, replace=False)]
        a, b = np.repeat(picked[:, 0], self.group), np.repeat(picked[:, 1], self.group)
        completions = self.policy.sample(a, b, rng, weights)
        responses = np.zeros((len(a), MAX_NEW_TOKENS), np.int64)
        for i, tokens in enumerate(completions.tokens):
            responses[i, :len(tokens)] = tokens
        ref = self.policy.token_logprobs(a, b, responses, self.policy.reference)
        self._version = version
        records: list[dict[str, Any]] = []
        for g in range(self.prompts):
            rows = range(g * self.group, (g + 1) * self.group)
            x, y = int(picked[g, 0]), int(picked[g, 1])
            items = [{"action": completions.tokens[i], "logprob": completions.logprob[i],
                      "ref_logprob": ref[i, :len(completions.tokens[i])].astype(np.float32),
                      "loss_mask": np.ones(len(completions.tokens[i]), bool)} for i in rows]
            rewards = [self.task.reward(x, y, completions.tokens[i]) for i in rows]
            records += self._recorder.group(self.task.prompt(x, y), items, rewards,
                                            text=f"{x}+{y}=")
        rewards = [r["reward"] for r in records]
        self.rewards.append(float(np.mean(rewards)))
        self.exact.append(float(np.mean(np.asarray(rewards) == 1.0)))
        return records


class OneAheadSampler:
    """`sample_fn` for `full_loop`, sampling asynchronously one version ahead of the trainer.

    Called with the trainer's version v, it returns the batch sampled earlier with the
    weights of v - 1 (the first call, with nothing sampled yet, samples with v), then starts
    sampling the next batch in a background thread with a snapshot of the weights of v, while
    the trainer updates v to v + 1. `staleness[c]` is cycle c's v minus its oldest row version.
    """

    def __init__(self, sampler: GroupSampler, max_staleness: int = 1) -> None:
        self.sampler = sampler
        self.max_staleness = max_staleness
        self.staleness: list[int] = []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gyre-llm-sampler")
        self._pending: Future[list[dict[str, Any]]] | None = None
        self._index = 0

    def __call__(self, version: int) -> list[dict[str, Any]]:
        policy = self.sampler.policy
        if policy.version != version:
            raise RuntimeError(f"full_loop is at version {version}, the policy at "
                               f"{policy.version}")
        if self._pending is None:
            records = self.sampler.sample(*policy.snapshot(), self._index)
        else:
            records = self._pending.result()
        self._index += 1
        self._pending = self._pool.submit(self.sampler.sample, *policy.snapshot(), self._index)
        oldest = min(int(r["policy_version"]) for r in records)
        self.staleness.append(version - oldest)
        if version - oldest > self.max_staleness:
            raise ContractError(Problem(
                f"cycles[{len(self.staleness) - 1}].policy_version",
                f">= {version - self.max_staleness} (max_staleness {self.max_staleness} at "
                f"version {version})", str(oldest), "the sampler fell too far behind"))
        return records

    def close(self) -> None:
        """Wait for the batch still being sampled (nobody trains on it; its failure is
        raised) and stop the thread."""
        pending, self._pending = self._pending, None
        try:
            if pending is not None:
                pending.result()
        finally:
            self._pool.shutdown()

    def __enter__(self) -> OneAheadSampler:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        pending, self._pending = self._pending, None  # the loop failed: say so first
        failed = pending.exception() if pending is not None else None
        self._pool.shutdown()
        if failed is not None and hasattr(exc, "add_note"):  # Python >= 3.11
            exc.add_note(f"the batch being sampled ahead failed too: {failed}")


def group_advantages(records: list[Mapping[str, Any]], eps: float = EPS) -> dict[str, float]:
    """Each episode's GRPO advantage computed directly from the records, row by row: its
    reward minus its group's mean over the group's unbiased std + eps. Stage 2 compares the
    map's `advantages` with it."""
    groups: dict[str, list[float]] = {}
    for r in records:
        groups.setdefault(r["group_id"], []).append(float(r["reward"]))
    out = {}
    for r in records:
        rewards = groups[r["group_id"]]
        mean = sum(rewards) / len(rewards)
        std = (sum((x - mean) ** 2 for x in rewards) / (len(rewards) - 1)) ** 0.5
        out[r["episode_id"]] = (float(r["reward"]) - mean) / (std + eps)
    return out


# -- the stages ----------------------------------------------------------------------------

@dataclass
class LLMDemoResult(DemoReport):
    """What `demo --llm` did: each stage's verdict and figures, the reward curves and the
    accuracies (a `DemoReport`: `to_dict` is what `demo --llm --format json` prints)."""

    demo = "llm"
    rewards: list[list[float]] = field(default_factory=list)
    """Stage 3's curves: per seed, the mean reward of the batch each cycle trained on."""
    staleness: list[list[int]] = field(default_factory=list)
    accuracy: list[tuple[float, float]] = field(default_factory=list)
    """Per seed, the greedy exact accuracy on all 100 problems before and after training."""


TrainRun = Callable[..., "list[float] | None"]
"""One stage-3 run: `(say, result, task, map_path, trainer_path, cycles, seed, log, notes)` ->
the run's reward curve, or None when it broke the contract (and said so)."""


def run_llm_demo(out: TextIO, *, out_dir: Path, cycles: int = 40, seed: int = 0,
                 seeds: int = STAGE3_SEEDS, notes: str = "", plot: bool = False,
                 train_run: TrainRun | None = None, how: str = "") -> LLMDemoResult:
    """Run stage 1, the diff, stage 2 and stage 3 (`seeds` runs of `cycles` updates).

    Files land in `out_dir`; with `plot`, stage 3's reward curves go to `runs.png` too
    (matplotlib, the `demo` extra). `train_run` runs one seed of stage 3 (default: sampler and
    trainer in this process; `procdemo.train_run_procs`: the sampler in its own process, through
    a channel), `how` says how in stage 3's heading."""
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    say = Say(out)
    result = LLMDemoResult(out_dir=out_dir, seed=seed, cycles=cycles)
    task = AdditionTask()
    say(f"gyre-contract demo --llm: GRPO on 'a+b=' with a numpy token policy (vocabulary "
        f"{len(VOCAB)} tokens, at most {MAX_NEW_TOKENS} generated; seed {seed}, files in "
        f"{out_dir})")
    policy = TokenPolicy(seed=seed)
    with timed(result, "stage 1"):
        rollouts = _stage1(say, result, policy, task, out_dir, seed)
    with timed(result, "diff"):
        map_path, trainer_path = _diff_stage(say, result, out_dir)
    with timed(result, "stage 2"):
        _stage2(say, result, rollouts, map_path, trainer_path, policy)
    if result.passed:
        with timed(result, "stage 3"):
            _stage3(say, result, task, map_path, trainer_path, out_dir, cycles, seed, seeds,
                    notes, plot, train_run or _train_run, how)
    else:
        result.record("stage 3", False, ran=False)
        say("\n=== Stage 3: the full loop ===\nnot run: an earlier stage failed")
    result.seconds = time.perf_counter() - started
    result.list_files()
    say(f"\n{result.to_text()}")
    return result



def _stage1(say: Say, result: LLMDemoResult, policy: TokenPolicy, task: AdditionTask,
            out_dir: Path, seed: int) -> Path:
    say.heading("Stage 1: the sampler alone",
                f"{PROMPTS_PER_BATCH} prompts x {GROUP_SIZE} completions recorded as "
                "AdditionStep (per-token logprob and ref_logprob, group_id, loss_mask, "
                "policy_version); the file validates and every episode is complete")
    sampler = GroupSampler(policy, task, seed=seed, run_id="stage1")
    path = out_dir / "rollouts.jsonl"
    try:
        records = sampler.sample(*policy.snapshot(), 0)
    except ContractError as err:
        say(str(err))
        result.failed("stage 1", err)
        say.verdict(False, "the sampler broke the contract")
        return path
    write_steps(path, records)
    say("one group (the completions of one prompt), as recorded:")
    say(_group_table(records[:GROUP_SIZE]))
    report = validate_file(path, AdditionStep, require_complete=True)
    say("\nthe whole file (gyre-contract validate):\n")
    say(report.to_text())
    ok = report.ok and report.episodes == len(records) and not report.warnings
    mean_reward = float(np.mean([r['reward'] for r in records]))
    result.record("stage 1", ok, generations=report.steps, episodes=report.episodes,
                  groups=PROMPTS_PER_BATCH, group_size=GROUP_SIZE,
                  problems=report.problem_count, warnings=len(report.warnings),
                  mean_reward=mean_reward, file=path.name)
    say.verdict(
        ok, f"{report.steps} generations in {report.episodes} episodes of "
        f"{PROMPTS_PER_BATCH} groups, {report.problem_count} problems, "
        f"mean reward {mean_reward:.3f}")
    return path


def _group_table(records: Sequence[Mapping[str, Any]]) -> str:
    first = records[0]
    lines = [f"  group {first['group_id']}, prompt {first['observation']['text']!r} "
             f"(ids {np.asarray(first['observation']['token_ids']).tolist()}), policy version "
             f"{first['policy_version']}",
             f"  {'episode':<12} {'completion':<11} {'reward':>6}  {'sum logprob':>11}  "
             f"{'sum ref_logprob':>15}"]
    for r in records:
        text = decode(r["action"]) + ("<eos>" if int(r["action"][-1]) == 2 else "")
        lines.append(f"  {r['episode_id']:<12} {text:<11} {r['reward']:>6.3f}  "
                     f"{float(np.sum(r['logprob'])):>11.3f}  "
                     f"{float(np.sum(r['ref_logprob'])):>15.3f}")
    return "\n".join(lines)


def _json_text(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _diff_stage(say: Say, result: LLMDemoResult, out_dir: Path) -> tuple[Path, Path]:
    say.heading("Diff: sampler schema vs a verl-style trainer schema",
                "no trainer field is missing; the written map makes one row per generation "
                "and group-normalised advantages")
    sampler, trainer = out_dir / "sampler.json", out_dir / "trainer.json"
    write_text_atomic(sampler, _json_text(json_schema(AdditionStep)))
    write_text_atomic(trainer, _json_text(verl_actor_schema()))
    report = diff(sampler, trainer)
    say(report.to_text())
    fmap = report.field_map()
    map_path = out_dir / "map.json"
    write_text_atomic(map_path, _json_text(fmap))
    ops = sorted({op for op in map(_op_of, fmap.get("fields", {}).values()) if op is not None})
    rows = FieldMap.from_dict(fmap, source=str(map_path)).layout
    say(f"\nmap written to {map_path}: rows={rows.rows}, ops {ops}")
    ok = (report.exit_code() == 0 and isinstance(rows, TokenRows)
          and "group_norm" in json.dumps(fmap.get("fields", {}).get("advantages", {})))
    result.record("diff", ok, counts=report.counts(),
                  warnings=[w.code for w in report.warnings], rows=rows.rows,
                  ops=ops, files=[sampler.name, trainer.name, map_path.name])
    say.verdict(ok, "the map realises the diff")
    return map_path, trainer


def _op_of(spec: Any) -> str | None:
    return spec.get("op") if isinstance(spec, Mapping) else None


def _stage2(say: Say, result: LLMDemoResult, rollouts: Path, map_path: Path,
            trainer_path: Path, policy: TokenPolicy) -> None:
    say.heading("Stage 2: half way (map + collate + one GRPO loss, no update)",
                "the batch fits the trainer schema, its advantages equal the group-normalised "
                "rewards computed from the file, the loss is one finite number, weights unchanged")
    if not (result.stages.get("stage 1") and result.stages.get("diff")):
        result.record("stage 2", False, ran=False)
        say.verdict(False, "not run: an earlier stage failed")
        return
    before = policy.weights.copy()
    try:
        report = half_way(rollouts, map_path, policy.loss, model=AdditionStep,
                          trainer=trainer_path)
    except ContractError as err:
        say(str(err))
        result.failed("stage 2", err)
        say.verdict(False, "the batch or the loss broke the contract")
        return
    say(report.to_text())
    records = [json.loads(line) for line in rollouts.read_text(encoding="utf-8").splitlines()]
    want = np.array(list(group_advantages(records).values()), np.float32)
    batch = report.batch
    mask = np.asarray(batch["response_mask"], bool)
    got = np.asarray(batch["advantages"], np.float32)
    got_rows = got if got.ndim == 1 else np.where(mask, got, np.nan)[:, 0]
    off_mask_zero = got.ndim == 1 or not got[~mask].any()
    error = float(np.max(np.abs(got_rows - want)))
    say(f"advantages vs group-normalised rewards computed row by row from the file: max |diff| "
        f"{error:.2e}; zero off the response mask: {off_mask_zero}")
    ok = (np.array_equal(before, policy.weights) and report.loss is not None
          and error < 1e-5 and off_mask_zero)
    result.record("stage 2", ok, loss=report.loss, rows=report.rows,
                  fields={k: list(v.shape or ()) for k, v in report.fields.items()},
                  advantage_max_error=error, zero_off_mask=bool(off_mask_zero),
                  weights_unchanged=bool(np.array_equal(before, policy.weights)))
    say.verdict(
        ok, f"GRPO loss {report.loss:.4f} (clip {policy.clip}, KL k3 beta {policy.beta}, "
        f"token-mean), weights unchanged")


def _stage3(say: Say, result: LLMDemoResult, task: AdditionTask, map_path: Path,
            trainer_path: Path, out_dir: Path, cycles: int, seed: int, seeds: int,
            notes: str, plot: bool, train_run: TrainRun, how: str) -> None:
    say.heading(f"Stage 3: the full loop, sampling one version ahead{how}",
                f"{seeds} seeds x {cycles} GRPO updates; every cycle's rows are at most 1 "
                "version old (the sampler runs one version behind the trainer after the "
                "first cycle); in every run the mean reward rises")
    log = RunLog(out_dir / "runs.jsonl")
    if log.path.exists():
        log.path.unlink()
    result.record("stage 3", False, seeds=stage3_seeds(seed, seeds), cycles=cycles,
                  max_staleness=1, runs=[], run_log=log.path.name)
    for run_seed in stage3_seeds(seed, seeds):
        curve = train_run(say, result, task, map_path, trainer_path, cycles, run_seed, log,
                          notes)
        if curve is None:
            return
    checks = (*FULL_LOOP_CHECKS, *(CHANNEL_CHECKS if how else ()))
    say("\nchecks that held in every run:\n" + "\n".join(f"  ok: {c}" for c in checks))
    say("\nmean reward per cycle (one run per seed; each batch sampled one version behind):")
    for run_seed, curve in zip(stage3_seeds(seed, seeds), result.rewards, strict=True):
        say(f"  seed {run_seed}: " + " ".join(f"{x:.2f}" for x in curve))
    rose = [reward_rose(curve) for curve in result.rewards]
    stale_ok = all(s[0] == 0 and all(x == 1 for x in s[1:]) for s in result.staleness)
    before = "/".join(f"{a:.2f}" for a, _ in result.accuracy)
    after = "/".join(f"{b:.2f}" for _, b in result.accuracy)
    label, first, last = first_last(result.rewards, cycles)
    say(f"staleness per cycle: {result.staleness[0][:6]}... (every run: 0 then 1)"
        if stale_ok else f"staleness per cycle: {result.staleness}")
    say(f"greedy exact accuracy on all 100 problems: {before} before → {after} after")
    say(f"run log {log.path}")
    plotted = _plot(say, log, out_dir) if plot else None
    result.record("stage 3", all(rose) and stale_ok, reward_rose=rose, staleness_ok=stale_ok,
                  plot=plotted)
    say.verdict(all(rose) and stale_ok,
                f"{seeds} seeds x {cycles} updates, mean reward ({label}) {first} → {last}")


def _train_run(say: Say, result: LLMDemoResult, task: AdditionTask, map_path: Path,
               trainer_path: Path, cycles: int, run_seed: int, log: RunLog,
               notes: str) -> list[float] | None:
    policy = TokenPolicy(seed=run_seed)
    sampler = GroupSampler(policy, task, seed=run_seed, run_id=f"seed{run_seed}")
    accuracy_before = policy.greedy_accuracy(task)
    say(f"\nseed {run_seed}: a fresh policy, {cycles} updates")

    def train_step(batch: Mapping[str, Any]) -> dict[str, float]:
        trained = policy.version  # the batch this update trains on is the cycle's own
        return grpo_metrics(policy, batch, sampler.rewards[trained], sampler.exact[trained])

    try:
        with OneAheadSampler(sampler) as ahead:
            report = full_loop(ahead, train_step, map_path, cycles, max_staleness=1,
                               run_id=f"llm-demo-seed{run_seed}",
                               config=run_config(policy, cycles), run_log=log, notes=notes,
                               model=AdditionStep, trainer=trainer_path)
    except ContractError as err:
        say(str(err))
        result.failed("stage 3", err)
        say.verdict(False, "the loop broke the contract")
        return None
    return finish_run(say, result, report, sampler.rewards[:cycles], list(ahead.staleness),
                      accuracy_before, policy, task, run_seed)


def run_config(policy: TokenPolicy, cycles: int, **more: Any) -> dict[str, Any]:
    """A stage-3 run's configuration (its run-log key): the task, the batch, the optimiser."""
    return {"task": "a+b=", "group": GROUP_SIZE, "prompts": PROMPTS_PER_BATCH,
            "cycles": cycles, "lr": policy.lr, "clip": policy.clip, "beta": policy.beta,
            "max_staleness": 1, **more}


def grpo_metrics(policy: TokenPolicy, batch: Mapping[str, Any], mean_reward: float,
                 exact: float) -> dict[str, float]:
    """One GRPO update on `batch`; its metrics with the sampled batch's mean reward."""
    mask = np.asarray(batch["response_mask"], bool)
    return {**policy.train_step(batch), "mean_reward": mean_reward, "exact": exact,
            "rollout_kl": float(np.asarray(batch["kl"])[mask].mean())}


def finish_run(say: Say, result: LLMDemoResult, report: Any, curve: list[float],
               staleness: list[int], accuracy_before: float, policy: TokenPolicy,
               task: AdditionTask, run_seed: int) -> list[float]:
    """Say and keep what one stage-3 run did: its compact table, curve, staleness, accuracy."""
    rows = cycle_rows(report)
    say(f"stage 3 (full loop): {len(report.cycles)} cycles, {report.n_steps} steps, "
        f"{report.n_episodes} episodes, policy version {report.policy_version}; every 5th "
        f"cycle and the last (the full table: runs.jsonl, or --format json):")
    say(compact_table(rows))
    accuracy = (accuracy_before, policy.greedy_accuracy(task))
    result.rewards.append(curve)
    result.staleness.append(staleness)
    result.accuracy.append(accuracy)
    result.figures["stage 3"]["runs"].append({
        "seed": run_seed, "mean_reward": curve, "staleness": list(staleness),
        "accuracy_before": accuracy[0], "accuracy_after": accuracy[1],
        "policy_version": report.policy_version, "steps": report.n_steps,
        "cycles": rows})
    return curve


def _plot(say: Say, log: RunLog, out_dir: Path) -> str | None:
    return plot_curves(say, log, out_dir, "mean_reward", "mean reward of the batch trained on",
                       "mean reward per cycle, one line per seed")


def stage3_seeds(seed: int, seeds: int = STAGE3_SEEDS) -> list[int]:
    """The seeds of stage 3's runs: the ones after stage 1's `seed`."""
    return [seed + 1 + i for i in range(seeds)]


def reward_rose(curve: list[float]) -> bool:
    """The last third of the cycles beats the first third, on average."""
    third = max(1, len(curve) // 3)
    return float(np.mean(curve[-third:])) > float(np.mean(curve[:third]))
