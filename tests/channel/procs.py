"""What the channel tests share: a pinned step model, step records, and the child processes.

Run as a script, this module is one end of a channel in its own OS process (the process
tests start it with `subprocess`): `python procs.py sampler ...` or `python procs.py trainer
...`; each prints one JSON line of what it did on stdout when it ends (and `ready` lines where
a test waits for a moment to kill it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract.core._tensor import Tensor
from gyre_contract.pinned import CartPoleStep, LLMStep

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"
TOKEN_MAP = {"gyre_field_map": 1, "rows": "step", "fields": {
    **{k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                "response_length", "logprob", "reward", "episode_id",
                                "policy_version", "step")},
    "advantage": {"from": "reward"}}}
"""A token map (one row per generation) whose every source the `Completion` model requires."""


class CartStep(CartPoleStep):
    """CartPole with `logprob` and `value` recorded on every step: the example map reads them."""

    logprob: Tensor("float32", [], role="logprob", description="log pi(a|s)")
    value: Tensor("float32", [], role="value", description="V(s)")


class Completion(LLMStep):
    """An LLM generation whose log-probs are always recorded (the token map reads them)."""

    logprob: Tensor("float32", ["A"], role="logprob", description="per-token log-probs")


MODELS = {"CartStep": CartStep, "Completion": Completion}


def episodes(prefix: str, n: int, length: int = 5, version: int = 0,
             seed: int = 0) -> list[dict[str, Any]]:
    """`n` complete CartPole episodes of `length` steps, ids `{prefix}-{i}`, one version."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n):
        for t in range(length):
            out.append({"observation": rng.random(4).astype(np.float32), "action": t % 2,
                        "logprob": -0.69, "value": 0.5, "reward": 1.0, "step": t,
                        "episode_id": f"{prefix}-{e}", "terminated": t == length - 1,
                        "truncated": False, "policy_version": version})
    return out


def completions(prefix: str, n: int, version: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """`n` single-turn generations (one step each) of varying prompt and response lengths."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a = int(rng.integers(1, 9))
        out.append({"observation": {"token_ids": rng.integers(3, 50, int(rng.integers(2, 7)))},
                    "action": rng.integers(3, 50, a),
                    "logprob": -rng.random(a).astype(np.float32), "reward": float(i % 2),
                    "step": 0, "episode_id": f"{prefix}-{i}", "terminated": True,
                    "truncated": False, "policy_version": version})
    return out


def say(**data: Any) -> None:
    print(json.dumps(data), flush=True)


# -- the child processes -----------------------------------------------------------------------

def sampler(args: argparse.Namespace) -> int:
    from gyre_contract.channel import open_sampler

    end = open_sampler(args.uri, model=MODELS[args.model], max_pending=args.max_pending)
    for i in range(args.puts):
        version = args.version + (i if args.versions else 0)
        if args.model == "Completion":
            steps = completions(f"{args.prefix}{i}", args.episodes, version, seed=i)
        else:
            steps = episodes(f"{args.prefix}{i}", args.episodes, args.length, version, seed=i)
        if args.fsize is not None and i == args.puts - 1:
            _limit_file_size(args.fsize)
        if args.slow_write and i == args.puts - 1:
            _slow_writes()
        try:
            meta = end.put(steps)
        except OSError as err:
            say(failed=str(err), put=i, counts=end.counts.to_dict())
            return 3
        say(put=i, segment=meta.segment, steps=meta.steps)
    say(done=True, counts=end.counts.to_dict())
    return 0


def trainer(args: argparse.Namespace) -> int:
    from gyre_contract.channel import open_trainer
    from gyre_contract.channel._handshake import HandshakeError

    if args.slow_removal:
        _slow_removals()
    mapping = TOKEN_MAP if args.model == "Completion" else CARTPOLE_MAP
    if args.map is not None:
        mapping = json.loads(args.map)
    try:
        end = open_trainer(args.uri, map=mapping)
    except HandshakeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    got: list[str] = []
    episodes_seen: list[str] = []
    while end.counts.acked_steps + end.counts.dropped_steps < args.steps:
        try:
            delivery = end.get(rows=args.rows, timeout=args.timeout,
                               current_version=args.current_version,
                               max_staleness=args.max_staleness)
        except TimeoutError:
            break
        got += delivery.segments
        episodes_seen += np.asarray(delivery.batch["episode_id"]).tolist()
        if args.hold:
            say(ready=True, segments=list(delivery.segments))
            time.sleep(600)  # killed here, after get and before ack
        end.ack(delivery)
    say(segments=got, episodes=episodes_seen, counts=end.counts.to_dict())
    return 0


def _slow_writes() -> None:
    """Write the next segment in small pieces with pauses, saying when the first is on disk:
    the test kills the process in the middle of the write (the temporary file half written).
    On Ray, where one actor call makes a segment visible, say so just before that call."""
    from gyre_contract.channel import _filebackend

    write_all, write_file = _filebackend._write_all, _filebackend.write_file

    def slow(path: Any, data: Any, folder: int) -> None:
        def write(fd: int, data: Any) -> None:
            view = memoryview(data)
            for start in range(0, len(view), 1024):
                write_all(fd, view[start:start + 1024])
                if start == 0:
                    say(writing=str(path), size=len(view))
                time.sleep(0.05)

        _filebackend._write_all = write
        try:
            write_file(path, data, folder)
        finally:
            _filebackend._write_all = write_all

    _filebackend.write_file = slow

    from gyre_contract.channel._raybackend import RayBackend

    real = RayBackend.write_segment

    def slow_ray(self: Any, segment: str, data: Any, meta: Any) -> Any:
        say(writing=segment)  # one actor call makes it visible: killed before it
        time.sleep(60)
        return real(self, segment, data, meta)

    RayBackend.write_segment = slow_ray  # type: ignore[method-assign]


def _slow_removals() -> None:
    """Each removal of a segment file takes 0.3 s longer (the process still exits at once
    after its last ack: what is queued then must still go)."""
    real = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if f"{os.sep}segments{os.sep}" in os.fspath(path):
            time.sleep(0.3)
        real(path, *args, **kwargs)

    os.unlink = unlink  # type: ignore[assignment]


def _limit_file_size(limit: int) -> None:
    """From now on a file may not grow past `limit` bytes: the next large write fails with
    EFBIG, as a write on a full disk fails with ENOSPC."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from write(), not a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=("sampler", "trainer"))
    p.add_argument("--uri", required=True)
    p.add_argument("--model", default="CartStep", choices=sorted(MODELS))
    p.add_argument("--prefix", default="ep")
    p.add_argument("--puts", type=int, default=1)
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--length", type=int, default=5)
    p.add_argument("--version", type=int, default=0)
    p.add_argument("--versions", action="store_true", help="put i has version + i")
    p.add_argument("--max-pending", type=int, default=None)
    p.add_argument("--slow-write", action="store_true")
    p.add_argument("--fsize", type=int, default=None)
    p.add_argument("--steps", type=int, default=0, help="trainer: stop after this many steps")
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--current-version", type=int, default=None)
    p.add_argument("--max-staleness", type=int, default=None)
    p.add_argument("--hold", action="store_true")
    p.add_argument("--slow-removal", action="store_true", help="trainer: slow segment unlinks")
    p.add_argument("--map", default=None, help="trainer: a map as JSON text")
    args = p.parse_args(argv)
    return sampler(args) if args.role == "sampler" else trainer(args)


if __name__ == "__main__":
    os.environ.setdefault("GYRE_CHILD", "1")
    sys.exit(main(sys.argv[1:]))
