"""`gyre-contract demo`: the whole left-to-right path on Gymnasium CartPole-v1, stage by stage.

Stage 1 samples episodes with a fixed policy, prints one episode step by step (`show_episode`)
and validates the rollout file; the diff compares the
sampler's schema with the trainer's and writes the field map; stage 2 maps, collates and runs one
loss with no update; stage 3 runs sample → map → train cycles of a small numpy policy-gradient
learner and keeps the run log. Needs the `demo` extra (gymnasium; matplotlib for the plot).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from gyre_contract.core._errors import ContractError, InputError
from gyre_contract.harness._demoreport import DemoReport, Say, cycle_rows, plot_curves, timed
from gyre_contract.harness._recorder import Recorder
from gyre_contract.harness._runlog import RunLog, format_summary, summarize
from gyre_contract.harness._stages import full_loop, half_way
from gyre_contract.io import validate_file, write_steps
from gyre_contract.io._atomic import write_text_atomic
from gyre_contract.io._show import show_episode
from gyre_contract.pinned import CartPoleBatch, CartPoleStep
from gyre_contract.schema import diff, json_schema

GAMMA, LAM = 0.99, 0.95


@dataclass
class SoftmaxPolicy:
    """A linear softmax policy over CartPole's 4 observations with a linear value function.

    Small enough to train in numpy in seconds; its `version` advances with each update.
    """

    seed: int
    lr: float = 0.05
    version: int = 0
    weights: np.ndarray = field(default_factory=lambda: np.zeros((5, 2)))
    value_weights: np.ndarray = field(default_factory=lambda: np.zeros(5))
    _moments: list[np.ndarray] = field(default_factory=lambda: [np.zeros((5, 2)), np.zeros((5, 2))])
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    def probs(self, obs: np.ndarray) -> np.ndarray:
        logits = _features(obs) @ self.weights
        logits -= logits.max(axis=-1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=-1, keepdims=True)

    def value(self, obs: np.ndarray) -> np.ndarray:
        return _features(obs) @ self.value_weights

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """Act on a batch of observations `[N, 4]`: action, its log-prob and V(s)."""
        p = self.probs(obs)
        action = (self._rng.random(len(p)) < p[:, 1]).astype(np.int64)
        logprob = np.log(p[np.arange(len(p)), action]).astype(np.float32)
        return {"action": action, "logprob": logprob,
                "value": self.value(obs).astype(np.float32)}

    def loss(self, batch: dict[str, Any]) -> float:
        """Policy-gradient surrogate −E[log π(a|s)·Â] plus ½·E[(V(s) − G)²], over real steps."""
        obs, act, adv, mask = _flat(batch)
        logp = np.log(self.probs(obs)[np.arange(len(act)), act])
        value_error = self.value(obs) - np.asarray(batch["return"])[mask]
        return float(-(logp * _normalised(adv)).mean() + 0.5 * (value_error**2).mean())

    def train_step(self, batch: dict[str, Any]) -> dict[str, float]:
        """One Adam step on the surrogate, then refit the value function to the returns.

        Returns the batch's mean episode length, the value loss ½·E[(V(s) − G)²] before the
        refit (`value_loss`) and the new version; `full_loop` keeps the numbers as the run's
        learning curves.
        """
        obs, act, adv, mask = _flat(batch)
        p = self.probs(obs)
        grad_logits = (np.eye(2)[act] - p) * _normalised(adv)[:, None]
        grad = _features(obs).T @ grad_logits / len(act)
        m, v = self._moments
        m[:] = 0.9 * m + 0.1 * grad
        v[:] = 0.999 * v + 0.001 * grad**2
        self.weights += self.lr * m / (np.sqrt(v) + 1e-8)
        returns = np.asarray(batch["return"])[mask]
        value_loss = float(0.5 * ((self.value(obs) - returns) ** 2).mean())
        self.value_weights = np.linalg.lstsq(_features(obs), returns, rcond=None)[0]
        self.version += 1
        lengths = mask.sum(axis=1)
        return {"mean_episode_length": float(lengths.mean()), "value_loss": value_loss,
                "policy_version": self.version}


def _features(obs: np.ndarray) -> np.ndarray:
    obs = np.asarray(obs, dtype=np.float64)
    return np.concatenate([obs, np.ones(obs.shape[:-1] + (1,))], axis=-1)


def _flat(batch: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    mask = np.asarray(batch["mask"])
    return (np.asarray(batch["obs"])[mask], np.asarray(batch["action"])[mask],
            np.asarray(batch["advantage"], dtype=np.float64)[mask], mask)


def _normalised(adv: np.ndarray) -> np.ndarray:
    return (adv - adv.mean()) / (adv.std() + 1e-8)


# -- the stages ---------------------------------------------------------------------------

@dataclass
class DemoResult(DemoReport):
    """What the demo did: each stage's verdict and figures, and where its files are (a
    `DemoReport`: `to_dict` is what `gyre-contract demo --format json` prints)."""

    demo = "cartpole"
    lengths: list[list[float]] = field(default_factory=list)
    """Stage 3's learning curves: per seed, the mean episode length of each cycle."""


def run_demo(out: TextIO, *, out_dir: Path, cycles: int = 12, seed: int = 0,
             episodes_per_cycle: int = 32, plot: bool = True, notes: str = "") -> DemoResult:
    """Run the three stages; return their verdicts. Files land in `out_dir`.

    Stage 3 trains `cycles` cycles from scratch with each of `STAGE3_SEEDS` seeds. Each run
    record's notes say how the map made the batch, then `notes`.
    """
    gym = _gymnasium()
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    say = Say(out)
    result = DemoResult(out_dir=out_dir, seed=seed, cycles=cycles)
    policy = SoftmaxPolicy(seed=seed)
    say(f"gyre-contract demo on Gymnasium CartPole-v1 (seed {seed}, files in {out_dir})")
    with timed(result, "stage 1"), _vector_env(gym, STAGE1_TIME_LIMIT) as envs:
        rollouts = _stage1(say, result, envs, policy, CartPoleStep, out_dir, seed,
                           episodes_per_cycle)
    with timed(result, "diff"):
        map_path = _diff_stage(say, result, CartPoleStep, CartPoleBatch, out_dir)
    with timed(result, "stage 2"):
        _stage2(say, result, rollouts, map_path, policy, CartPoleStep, CartPoleBatch)
    with timed(result, "stage 3"), _vector_env(gym, STAGE3_TIME_LIMIT) as envs:
        _stage3(say, result, envs, CartPoleStep, map_path, out_dir, cycles, seed,
                episodes_per_cycle, plot, notes)
    result.seconds = time.perf_counter() - started
    result.list_files()
    say(f"\n{result.to_text()}")
    return result



# A short time limit in stage 1 makes the sampler meet both endings (terminated and truncated);
# stage 3 allows long episodes so that learning shows, with truncations once the policy is good.
STAGE1_TIME_LIMIT, STAGE3_TIME_LIMIT, N_ENVS = 25, 200, 8
SHOW_WIDTH = 100  # stage 1's episode table: the demo's output is often a log, not a terminal


@contextmanager
def _vector_env(gym: Any, time_limit: int) -> Iterator[Any]:
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=time_limit) for _ in range(N_ENVS)])
    try:
        yield envs
    finally:
        envs.close()


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError:

        raise InputError("the demo needs gymnasium: pip install 'gyre-contract[demo]'") from None
    return gymnasium


def _recorder(envs: Any, policy: SoftmaxPolicy, model: type, seed: int, run_id: str) -> Any:

    return Recorder(envs, policy, policy_version=lambda: policy.version,
                    value_fn=lambda o: float(policy.value(np.asarray(o)[None])[0]),
                    run_id=run_id, seed=seed, model=model)


def _stage1(say: Say, result: DemoResult, envs: Any, policy: SoftmaxPolicy, model: type,
            out_dir: Path, seed: int, n: int) -> Path:

    say.heading("Stage 1: the sampler alone",
                "every recorded step and episode validates against CartPoleStep; "
                "terminated and truncated are kept apart")
    recorder = _recorder(envs, policy, model, seed, "stage1")
    path = out_dir / "rollouts.jsonl"
    if path.exists():
        path.unlink()
    write_steps(path, recorder.record_episodes(n))
    say("look at one episode first (gyre-contract show):\n")
    say(show_episode(path, model=model, width=SHOW_WIDTH).to_text())
    say("\nthen check the whole file (gyre-contract validate):\n")
    report = validate_file(path, model, require_complete=True)
    say(report.to_text())
    ok = report.ok and (report.episodes or 0) == n
    say.verdict(ok, f"{report.steps} steps in {report.episodes} episodes, "
                f"{report.problem_count} problems")
    result.record("stage 1", ok, steps=report.steps, episodes=report.episodes,
                  problems=report.problem_count, file=path.name)
    return path


def _diff_stage(say: Say, result: DemoResult, step_model: type, batch_model: type,
                out_dir: Path) -> Path:

    say.heading("Diff: sampler schema vs trainer schema",
                "no trainer field is missing; the written map turns rollouts into the batch")
    sampler, trainer = out_dir / "sampler.json", out_dir / "trainer.json"
    write_text_atomic(sampler, _json_text(json_schema(step_model)))
    write_text_atomic(trainer, _json_text(json_schema(batch_model)))
    report = diff(sampler, trainer, gamma=GAMMA, lam=LAM)
    say(report.to_text())
    map_path = out_dir / "map.json"
    write_text_atomic(map_path, json.dumps(report.field_map(), indent=2) + "\n")
    ok = report.exit_code() == 0
    say.verdict(ok, f"map written to {map_path}")
    result.record("diff", ok, counts=report.counts(),
                  warnings=[w.code for w in report.warnings],
                  files=[sampler.name, trainer.name, map_path.name])
    return map_path


def _stage2(say: Say, result: DemoResult, rollouts: Path, map_path: Path,
            policy: SoftmaxPolicy, step_model: type, batch_model: type) -> None:

    say.heading("Stage 2: half way (map + collate + one loss, no update)",
                "the batch validates as CartPoleBatch and the loss is one finite number")
    before = policy.weights.copy()
    try:
        report = half_way(rollouts, map_path, policy.loss, model=step_model,
                          batch_model=batch_model)
    except ContractError as err:
        _failed(say, result, "stage 2", err, "the batch or the loss broke the contract")
        return
    say(report.to_text())
    ok = np.array_equal(before, policy.weights) and report.loss is not None
    say.verdict(ok, f"loss {report.loss:.4f}, weights unchanged")
    result.record("stage 2", ok, loss=report.loss, rows=report.rows,
                  time_steps=report.time_steps, steps=report.steps, padding=report.padding,
                  fields={k: list(v.shape or ()) for k, v in report.fields.items()},
                  weights_unchanged=bool(np.array_equal(before, policy.weights)))


def _stage3(say: Say, result: DemoResult, envs: Any, step_model: type, map_path: Path,
            out_dir: Path, cycles: int, seed: int, n: int, plot: bool, notes: str = "") -> None:
    say.heading("Stage 3: the full loop",
                f"every cycle's counts, timestamps and policy versions check out; one "
                f"configuration trained from scratch with {STAGE3_SEEDS} seeds, and in every run "
                f"the mean episode length goes up")
    log = RunLog(out_dir / "runs.jsonl")
    config = {"env": "CartPole-v1", "envs": N_ENVS, "time_limit": STAGE3_TIME_LIMIT,
              "episodes_per_cycle": n, "cycles": cycles, "lr": SoftmaxPolicy.lr}
    started = time.perf_counter()
    if log.path.exists():
        log.path.unlink()
    result.record("stage 3", False, seeds=stage3_seeds(seed), cycles=cycles, max_staleness=0,
                  runs=[], run_log=log.path.name)
    for run_seed in stage3_seeds(seed):
        say(f"\nseed {run_seed}: a fresh policy, {cycles} cycles")
        lengths = _train_run(say, result, envs, step_model, map_path, cycles, run_seed, n,
                             config, log, notes)
        if lengths is None:
            return
        result.lengths.append(lengths)
    say("\nlearning curves, mean episode length per cycle (one run per seed):")
    for run_seed, lengths in zip(stage3_seeds(seed), result.lengths, strict=True):
        say(f"  seed {run_seed}: " + " ".join(f"{x:.0f}" for x in lengths))
    say(f"\nrun log {log.path}: {STAGE3_SEEDS} runs of one configuration, so the spread over "
        "seeds shows")
    say(format_summary(summarize(log.read())))
    plotted = _plot(say, log, out_dir) if plot else None
    ok = all(_improved(lengths) for lengths in result.lengths)
    firsts = "/".join(f"{lengths[0]:.0f}" for lengths in result.lengths)
    lasts = "/".join(f"{lengths[-1]:.0f}" for lengths in result.lengths)
    say.verdict(ok, f"{STAGE3_SEEDS} seeds x {cycles} cycles in "
                f"{time.perf_counter() - started:.1f}s, mean episode length {firsts} → {lasts}")
    result.record("stage 3", ok, improved=[_improved(x) for x in result.lengths], plot=plotted)


def _train_run(say: Say, result: DemoResult, envs: Any, step_model: type, map_path: Path,
               cycles: int, run_seed: int, n: int, config: dict[str, Any], log: RunLog,
               notes: str = "") -> list[float] | None:
    """One run of stage 3: a fresh policy seeded `run_seed`; its mean episode length per cycle."""
    policy = SoftmaxPolicy(seed=run_seed)
    recorder = _recorder(envs, policy, step_model, run_seed, f"stage3-seed{run_seed}")
    lengths: list[float] = []

    def sample(version: int) -> list[Any]:
        episodes = recorder.collect_episodes(n)
        lengths.append(float(np.mean([len(e.columns["reward"]) for e in episodes])))
        return episodes

    try:
        report = full_loop(sample, policy.train_step, map_path, cycles, max_staleness=0,
                           start_version=policy.version, run_id=f"demo-seed{run_seed}",
                           config=config, run_log=log, notes=notes)
    except ContractError as err:
        _failed(say, result, "stage 3", err, "the loop broke the contract")
        return None
    say(report.to_text())
    result.figures["stage 3"]["runs"].append({
        "seed": run_seed, "mean_episode_length": lengths, "policy_version": report.policy_version,
        "steps": report.n_steps, "episodes": report.n_episodes, "cycles": cycle_rows(report)})
    return lengths


def _failed(say: Say, result: DemoResult, stage: str, err: ContractError, why: str) -> None:
    """A stage that broke the contract: its problems, its verdict, and no further work in it."""
    say(str(err))
    say.verdict(False, why)
    result.failed(stage, err)


STAGE3_SEEDS = 3
"""Stage 3 repeats one configuration this many times, with different seeds, so the run table
and the plot show a spread of repeats; each run's cycles are its learning curve."""


def stage3_seeds(seed: int) -> list[int]:
    """The seeds of stage 3's runs: the ones after stage 1's `seed`."""
    return [seed + 1 + i for i in range(STAGE3_SEEDS)]


def _improved(lengths: list[float]) -> bool:
    """The last third of the cycles beats the first third, on average."""
    third = max(1, len(lengths) // 3)
    return float(np.mean(lengths[-third:])) > float(np.mean(lengths[:third]))


def _json_text(doc: dict[str, Any]) -> str:
    """A schema as written to disk: two-space indent, final newline."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _plot(say: Say, log: RunLog, out_dir: Path) -> str | None:
    return plot_curves(say, log, out_dir, "mean_episode_length", "mean episode length (steps)",
                       "mean episode length per cycle, one line per seed; final value per seed")
