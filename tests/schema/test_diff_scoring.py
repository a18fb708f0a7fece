"""The diff's choice among sampler fields of one role, pinned as a table.

`_by_role` scores each sampler field that fits the trainer field: 1.0, plus 0.3 for an exact
fit (no cast, no reshape) or 0.15 for a castable one, plus 0.2 × name likeness (shared name words
over all name words) and 0.1 × how sure its role is; fields within 0.05 of the best are an
ambiguous match (a warning naming them). Each row below is chosen so that a change to one of
those weights flips its expected choice or its warning. Roles are declared (`x-gyre-role`), so
every candidate's role score is the same and only the weights under test decide.
"""

from __future__ import annotations

import pytest

from gyre_contract.schema._diffing import diff


def scalar(dtype: str, role: str = "reward") -> dict:
    kind = "integer" if dtype.startswith("int") else "number"
    return {"type": kind, "x-gyre-dtype": dtype, "x-gyre-role": role}


def sampler(*fields: tuple[str, str]) -> dict:
    """A sampler schema with scalar reward fields, in the order given (the order ties keep)."""
    return {"type": "object", "properties": {name: scalar(dtype) for name, dtype in fields}}


def trainer(name: str) -> dict:
    return {"type": "object", "x-gyre-batch-dims": ["B"],
            "properties": {name: {"type": "array", "items": {"type": "number"},
                                  "x-gyre-dtype": "float32", "x-gyre-role": "reward",
                                  "x-gyre-shape": ["B"]}}}


CASES = [
    # (why, trainer field, sampler fields in order, chosen, ambiguous)
    ("exact beats castable (0.3 vs 0.15)",
     "score", [("r_cast", "float16"), ("r_exact", "float32")], "r_exact", False),
    ("name likeness breaks a tie between two exact fits (weight 0.2)",
     "score", [("alpha", "float32"), ("score_x", "float32")], "score_x", False),
    ("exactness outweighs a one-in-three name likeness (0.15 > 0.2 / 3)",
     "score_one", [("score_uno", "float16"), ("beta", "float32")], "beta", False),
    ("a name likeness of 1/5 is within the 0.05 band: ambiguous",
     "score_one_two", [("gamma", "float32"), ("score_uno_dos", "float32")], "score_uno_dos", True),
    ("a name likeness of 1/3 is outside the 0.05 band: not ambiguous",
     "score_one", [("gamma", "float32"), ("score_uno", "float32")], "score_uno", False),
    ("two equal fits are ambiguous; the first listed is chosen",
     "score", [("delta", "float32"), ("epsilon", "float32")], "delta", True),
]


@pytest.mark.parametrize(("why", "target", "fields", "chosen", "ambiguous"), CASES,
                         ids=[c[0] for c in CASES])
def test_the_diff_scores_candidates_as_pinned(why, target, fields, chosen, ambiguous) -> None:
    report = diff(sampler(*fields), trainer(target))
    entry = next(e for e in report.entries if e.trainer_field == target)
    assert entry.sampler_fields == (chosen,), why
    warned = [w for w in report.warnings if w.code == "ambiguous_match"]
    assert bool(warned) is ambiguous, why
    if ambiguous:
        assert chosen in warned[0].message and target in warned[0].message
