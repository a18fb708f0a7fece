"""Properties over hostile bytes: any rollout, schema or map file gives an exit code and a
one-line message through the real CLI (in-process), never a traceback.

Inputs are either raw bytes or a soup of JSON fragments chosen to reach the deep code paths
(BOMs, CRLF, lone surrogates, NaN, big integers, duplicate keys, `$ref`s, map ops). Examples
are kept few (deadline=None) so the suite stays fast on a 2-core CI runner.
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyre_contract.cli._app import run

ROOT = Path(__file__).resolve().parent.parent
STEP_SCHEMA = ROOT / "schemas" / "rollout_step.v1.json"
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

GOOD_RECORD = {"observation": [0.01, -0.02, 0.03, 0.04], "action": 1, "logprob": -0.69,
               "reward": 1.0, "step": 0, "episode_id": "a", "terminated": True,
               "truncated": False, "policy_version": 0}
GOOD_LINE = orjson.dumps(GOOD_RECORD)
SMALL_MAP = {"gyre_field_map": 1, "fields": {
    "obs": {"from": "observation"}, "action": {"from": "action"}, "reward": {"from": "reward"},
    "done": {"op": "any", "from": ["terminated", "truncated"]},
    "advantage": {"op": "discounted_return",
                  "from": ["reward", "terminated", "truncated", "next_value"],
                  "gamma": 0.99},
    "logprob": {"from": "logprob"}, "mask": {"op": "mask"},
    "policy_version": {"from": "policy_version"}}}

FRAGMENTS = [
    b"{", b"}", b"[", b"]", b":", b",", b" ", b"\n", b"\r\n", b"\xef\xbb\xbf", b"\xed\xa0\x80",
    b'"\\ud800"', b'"\\udc00x"', b"0", b"-1", b"1.5", b"1e400", b"NaN", b"-Infinity",
    b"18446744073709551616", b"-9223372036854775809", b"true", b"null", b'""', b'"a"',
    b'"step"', b'"observation"', b"[0.1,0.2]", b'"episode_id"', b'"terminated"', b'"reward"',
    b'"type"', b'"object"', b'"array"', b'"number"', b'"properties"', b'"items"', b'"$ref"',
    b'"#"', b'"#/$defs/a"', b'"$defs"', b'"a"', b'"file:///etc/passwd"',
    b'"https://example.invalid/s.json"', b'"minItems"', b'"x-gyre-shape"', b'"x-gyre-dtype"',
    b'"gyre_field_map"', b'"fields"', b'"op"', b'"from"', b'"gae"', b'"cast"', b'"__import__"',
    b'"os.system"', b'"then"', b"1",
]
soup = st.lists(st.sampled_from(FRAGMENTS), max_size=80).map(b"".join)


def _mutations(base: bytes) -> st.SearchStrategy[bytes]:
    """A valid document with one splice of fragments or a cut: the near-misses."""
    return st.tuples(st.integers(0, len(base)), st.integers(0, 8), soup).map(
        lambda t: base[:t[0]] + t[2] + base[t[0] + t[1]:])


hostile = st.one_of(st.binary(max_size=600), soup)


def cli(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in argv], out, err)
    text = err.getvalue()
    assert "Traceback" not in text
    if code == 2:
        assert text.startswith("error: ") and text.count("\n") == 1, text
    elif code == 1 and text:  # a ContractError: a summary line, then one indented line each
        first, *rest = text.splitlines()
        assert first.startswith("error: ") and all(line.startswith("  ") for line in rest)
    elif text:  # exit 0: only warnings (infer names fields only some lines carry)
        assert all(line.startswith("warning: ") for line in text.splitlines()), text
    return code, out.getvalue(), text


def _file(folder: str, name: str, data: bytes) -> Path:
    path = Path(folder) / name
    path.write_bytes(data)
    return path


@SETTINGS
@given(data=st.one_of(hostile, _mutations(GOOD_LINE + b"\n" + GOOD_LINE.replace(b'"a"', b'"b"'))))
def test_any_bytes_as_a_rollout_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "r.jsonl", data)
        code, out, err = cli("validate", path)
        assert code in (0, 1) and err == ""
        assert out.rstrip().endswith("holds: no problems") == (code == 0)
        assert cli("infer", path)[0] in (0, 2)
        assert cli("validate", path, "--schema", STEP_SCHEMA)[0] in (0, 1)


_SCHEMA = json.dumps({"type": "object", "$defs": {"a": {"type": "number"}},
                      "properties": {"reward": {"$ref": "#/$defs/a"},
                                     "observation": {"type": "array", "minItems": 4,
                                                     "maxItems": 4, "items": {"type": "number"}}},
                      "required": ["reward"]}).encode()


@SETTINGS
@given(data=st.one_of(hostile, _mutations(_SCHEMA)))
def test_any_bytes_as_a_schema_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "s.json", data)
        rollouts = _file(folder, "r.jsonl", GOOD_LINE + b"\n")
        assert cli("diff", path, STEP_SCHEMA)[0] in (0, 1, 2)
        assert cli("diff", STEP_SCHEMA, path)[0] in (0, 1, 2)
        assert cli("validate", rollouts, "--schema", path)[0] in (0, 1, 2)


@SETTINGS
@given(data=st.one_of(hostile, _mutations(json.dumps(SMALL_MAP).encode())))
def test_any_bytes_as_a_map_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "m.json", data)
        rollouts = _file(folder, "r.jsonl", GOOD_LINE + b"\n")
        assert cli("batch", rollouts, "--map", path)[0] in (0, 1, 2)


def test_the_small_map_itself_builds_a_batch() -> None:
    """The base of the map mutations is a working map (so mutations are near-misses)."""
    with tempfile.TemporaryDirectory() as folder:
        path = _file(folder, "m.json", json.dumps(SMALL_MAP).encode())
        rollouts = _file(folder, "r.jsonl", GOOD_LINE + b"\n")
        assert cli("batch", rollouts, "--map", path)[0] == 0
        assert cli("diff", _file(folder, "s.json", _SCHEMA), STEP_SCHEMA)[0] in (0, 1)


# -- the library entry points behind the commands ------------------------------------------------

_KEYS = st.sampled_from(["observation", "action", "logprob", "value", "next_value", "reward",
                         "return", "step", "episode_id", "terminated", "truncated",
                         "policy_version", "info", "token_ids", "text", "op", "from", "cast",
                         "then", "gamma", "lam", "axis", "shape", "truncation", "x", ""])
_LEAVES = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
           | st.text(max_size=5) | st.sampled_from(["reward", "mask", "gae", "any", "float32",
                                                    "int64", "B", "T", "__import__"]))
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(_KEYS, inner, max_size=5), max_leaves=25)


@SETTINGS
@given(changes=st.dictionaries(_KEYS, _VALUES, max_size=5), whole=_VALUES)
def test_validate_step_raises_only_contract_errors(changes: dict, whole: object) -> None:
    from gyre_contract.core._errors import ContractError
    from gyre_contract.core._validate import validate_step

    for candidate in ({**GOOD_RECORD, **changes}, whole):
        try:
            validate_step(candidate)  # type: ignore[arg-type]
        except ContractError as err:
            assert str(err)


@SETTINGS
@given(fields=st.dictionaries(st.text(max_size=4), st.dictionaries(_KEYS, _VALUES, max_size=6),
                              max_size=4), whole=_VALUES)
def test_field_map_from_any_json_raises_only_field_map_errors(fields: dict, whole: object
                                                              ) -> None:
    from gyre_contract.core._errors import FieldMapError
    from gyre_contract.trainer._fieldmap import FieldMap

    for candidate in ({"gyre_field_map": 1, "fields": fields}, whole):
        try:
            FieldMap.from_dict(candidate)
        except FieldMapError as err:
            assert str(err)
