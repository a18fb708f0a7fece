"""Arrow arrays as numpy without pyarrow's pandas probe (`io._arrownumpy`).

pyarrow imports pandas (about 140 ms and 40 MB) the first time it converts between numpy and
Arrow; the bulk paths read only numbers, booleans and dictionary codes, whose buffers numpy views
as they are. The values must be exactly `to_numpy`'s, slices and nulls included, and the
commands that read columns must not load pandas.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.io._arrownumpy import numpy_of, valid_mask

pa = pytest.importorskip("pyarrow")
ROOT = Path(__file__).resolve().parents[2]

TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.float32(), pa.float64(), pa.bool_()]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(TYPES), st.lists(st.one_of(st.none(), st.integers(0, 100)), max_size=40),
       st.integers(0, 45), st.integers(0, 45))
def test_the_values_are_to_numpys(type_, values, start, length):
    if pa.types.is_boolean(type_):
        values = [None if v is None else v % 2 == 1 for v in values]
    array = pa.array(values, type=type_).slice(start, length)
    got, want = numpy_of(array), array.to_numpy(zero_copy_only=False)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(valid_mask(array), [v is not None for v in array.to_pylist()])


def test_strings_go_through_to_numpy():
    array = pa.array(["a", "bb", None]).slice(1)
    assert numpy_of(array).tolist() == ["bb", None]


@pytest.mark.parametrize("command", ["validate", "batch"])
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_reading_columns_does_not_import_pandas(tmp_path, command, kind):
    pytest.importorskip("pandas")  # without it there is nothing to keep out
    from gyre_contract import write_steps

    steps = [{"episode_id": f"e{e}", "step": t, "observation": [0.1, 0.2, 0.3, 0.4],
              "action": t % 2, "reward": 1.0, "terminated": t == 3, "truncated": False,
              "policy_version": 0, "value": 0.5, "logprob": -0.7}
             for e in range(50) for t in range(4)]
    path = tmp_path / f"steps.{kind}"
    write_steps(path, steps)
    argv = [command, str(path)] + (["--map", str(ROOT / "examples" / "cartpole_map.json")]
                                   if command == "batch" else [])
    said = tmp_path / "modules.txt"  # the CLI owns stdout and stderr
    code = ("import sys; from gyre_contract.cli import main\n"
            f"try:\n    main({argv!r})\n"
            f"finally:\n    open({str(said)!r}, 'w').write(' '.join(\n"
            "        m for m in ('pyarrow', 'pandas') if m in sys.modules))\n")
    env = {**os.environ, "GYRE_FAST_PATHS": "1"}  # the columns paths, even in CI's run without
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert said.read_text() == "pyarrow"  # the columns path ran, pandas stayed out
