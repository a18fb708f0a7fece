"""What a type checker tells a user of the package: mypy reads a pinned model and gives the
validated fields the types that validation yields (docs/contract.md §3, "Pinning")."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = '''
from typing import Annotated

import numpy as np

from gyre_contract import RolloutStep, Tensor, read_steps, validate_batch, validate_step
from gyre_contract.pinned import CartPoleStep, LLMStep


class MyStep(RolloutStep):
    observation: Annotated[np.ndarray, Tensor("float32", [4], role="observation")]
    action: Annotated[int, Tensor("int64", [], role="action")]
    logprob: Annotated[float | None, Tensor("float32", [], role="logprob")] = None


record: dict[str, object] = {}
step = validate_step(record, MyStep)
reveal_type(step)
reveal_type(step.observation)
reveal_type(step.action)
reveal_type(step.logprob)
reveal_type(step.reward)
reveal_type(step.episode_id)
reveal_type(validate_step(record))
reveal_type(validate_step(record, LLMStep).action)
reveal_type(validate_batch(record).mask)
for s in read_steps("rollouts.jsonl", CartPoleStep):
    reveal_type(s)


class Bare(RolloutStep):
    observation: Tensor("float32", [4])
'''

EXPECTED = ["MyStep", "ndarray", "int", "float | None", "float", "str", "RolloutStepV1",
            "ndarray", "ndarray", "CartPoleStep"]


@pytest.mark.slow
def test_mypy_reads_pinned_models_and_the_validators(tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent(USER_CODE))
    out, err, _ = mypy_api.run([
        str(user), "--config-file", str(ROOT / "pyproject.toml"),
        "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"])
    revealed = re.findall(r'Revealed type is "([^"]+)"', out)
    assert len(revealed) == len(EXPECTED), out + err
    # the class's own name ("numpy.ndarray[tuple[Any, ...], ...]" is an ndarray)
    assert [got.split("[")[0].rsplit(".", 1)[-1] for got in revealed] == EXPECTED, out
    # the spelling before 0.3: runs, but a call in an annotation is nothing a checker can read
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "[valid-type]" in errors[0], out
