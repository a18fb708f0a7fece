"""A JSON Schema inferred from real data: a JSON Lines rollout file or an `.npz` batch.

For a repository with no schema: `gyre-contract infer` reads the data and writes a schema with
`x-gyre-*` keys, ready to diff (docs/contract.md §5, §6). JSON numbers carry no width, so a float
column is `number` and an int column `integer`; a dim whose size changes between records becomes a
name listed in `x-gyre-varying-dims`.
"""

from __future__ import annotations

import difflib
import zipfile
from pathlib import Path
from typing import Any

from gyre_contract.core._errors import InputError
from gyre_contract.core._text import quoted
from gyre_contract.io._jsonfile import refuse_devices
from gyre_contract.io._lines import Lines, Parsed
from gyre_contract.schema._fieldtable import GYRE_DTYPES, MAX_FIELDS, Dim
from gyre_contract.schema._roles import resolve_role

MAX_PARTIAL_WARNINGS = 20
"""Fields only some lines carry, named one by one in `infer`'s warnings; the rest are counted."""


def infer_schema(path: str | Path, *, warnings: list[str] | None = None) -> dict[str, Any]:
    """A JSON Schema inferred from a JSON Lines rollout file or an `.npz` batch.

    JSON numbers have no width, so a float column is `number` and an int column `integer` (both
    match any width in a diff); arrays of an `.npz` keep their exact dtypes. A dim whose size
    changes between records becomes a name and is listed in `x-gyre-varying-dims`.

    A field that only some lines carry becomes optional in the schema; when `warnings` is a
    list, a message naming each such field with its count is appended to it (a typo such as
    `trunctaed` on a few lines would otherwise enter the schema silently).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(_not_a_file(path))
    if path.suffix == ".npz":
        return _infer_npz(path)
    doc, counts, records = _infer_jsonl(path)
    if warnings is not None:
        warnings += partial_field_warnings(counts, records)
    return doc


def partial_field_warnings(counts: dict[str, int], records: int) -> list[str]:
    """One message per field present on fewer than all `records` lines. When a field of a
    similar name is on more lines and the two could never share a line (their counts add up
    to at most `records`), the rarer one is named as its likely typo (`trunctaed`: "a typo of
    'truncated'?"); `next_observation` beside an `observation` on every line is not."""
    partial = [(name, n) for name, n in counts.items() if n < records]
    out = []
    for name, n in partial[:MAX_PARTIAL_WARNINGS]:
        others = [k for k, m in counts.items() if k != name and n < m and n + m <= records]
        close = difflib.get_close_matches(name, others, n=1, cutoff=0.8) if len(name) <= 64 \
            else []
        hint = f"; a typo of {quoted(close[0])}?" if close else ""
        out.append(f"field {quoted(name)} is on {n:,} of {records:,} lines: optional in the "
                   f"schema{hint}")
    if len(partial) > MAX_PARTIAL_WARNINGS:
        out.append(f"... and {len(partial) - MAX_PARTIAL_WARNINGS} more fields on only some lines")
    return out


def _not_a_file(path: Path) -> str:
    """Why `path` cannot be read as a file: missing, a directory, or not a regular file."""
    if path.is_dir():
        return f"{path}: is a directory, not a rollout file or .npz batch"
    if path.exists():
        return f"{path}: not a regular file (a FIFO, device or socket); infer reads files only"
    return f"{path}: no such file"


def _schema_head(path: Path, kind: str | None) -> dict[str, Any]:
    head: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"inferred from {path.name}",
        "description": f"Inferred by gyre-contract infer from {path.name}; review before use.",
        "type": "object",
    }
    if kind is not None:
        head["x-gyre-kind"] = kind
    return head


class _Column:
    """What the records of one key looked like: JSON kinds seen, dims per axis, count."""

    def __init__(self) -> None:
        self.count = 0
        self.kinds: set[str] = set()
        self.ranks: set[int] = set()
        self.sizes: list[set[int]] = []
        self.children: dict[str, _Column] | None = None
        self.objects = 0

    def add(self, value: Any) -> None:
        self.count += 1
        if isinstance(value, dict):
            self.objects += 1
            if self.children is None:
                self.children = {}
            for key, sub in value.items():
                self.children.setdefault(key, _Column()).add(sub)
            return
        dims: list[int] = []
        while isinstance(value, list):
            dims.append(len(value))
            if not value:
                break
            for item in value[1:]:
                self._kind(_leaf_of(item))
            value = value[0]
        if isinstance(value, list):
            self.kinds.add("empty")
        else:
            self._kind(value)
        self.ranks.add(len(dims))
        while len(self.sizes) < len(dims):
            self.sizes.append(set())
        for axis, size in enumerate(dims):
            self.sizes[axis].add(size)

    def _kind(self, value: Any) -> None:
        if isinstance(value, bool):
            self.kinds.add("bool")
        elif isinstance(value, int):
            self.kinds.add("integer")
        elif isinstance(value, float):
            self.kinds.add("number")
        elif isinstance(value, str):
            self.kinds.add("string")
        elif value is None:
            self.kinds.add("null")
        elif isinstance(value, dict):
            self.kinds.add("object")

    def schema(self, name: str, varying: set[str]) -> dict[str, Any]:
        if self.children is not None and self.objects == self.count:
            if name in ("info", "infos"):
                return {"type": "object", "description": "free-form"}
            props = {k: c.schema(f"{name}_{k}", varying) for k, c in self.children.items()}
            required = [k for k, c in self.children.items() if c.count == self.objects]
            return {"type": "object", "properties": props, "required": required}
        kinds = self.kinds - {"empty"}
        dtype = _kinds_dtype(kinds)
        if len(self.ranks) != 1:
            return {"description": f"mixed ranks {sorted(self.ranks)}: not a tensor"}
        shape: list[Dim] = []
        for axis, sizes in enumerate(self.sizes):
            if len(sizes) == 1:
                shape.append(next(iter(sizes)))
            else:
                named = f"{name}_{axis}"
                shape.append(named)
                varying.add(named)
        body: dict[str, Any] = {}
        if dtype is None:
            body["description"] = f"mixed JSON types {sorted(kinds)}"
        else:
            body["type"] = {"bool": "boolean"}.get(dtype, dtype)
        for dim in reversed(shape):
            body = {"type": "array", "items": body}
            if isinstance(dim, int):
                body["minItems"] = body["maxItems"] = dim
        body["x-gyre-shape"] = shape
        if dtype in ("bool", "string"):
            body["x-gyre-dtype"] = dtype
        return body


def _leaf_of(value: Any) -> Any:
    while isinstance(value, list) and value:
        value = value[0]
    return value


def _kinds_dtype(kinds: set[str]) -> str | None:
    if kinds <= {"integer"} and kinds:
        return "integer"
    if kinds and kinds <= {"integer", "number"}:
        return "number"
    if len(kinds) == 1:
        (only,) = kinds
        return only if only in ("bool", "string") else None
    return None


def _infer_jsonl(path: Path) -> tuple[dict[str, Any], dict[str, int], int]:
    """The schema, how many lines carry each top-level key, and how many lines were read."""
    columns: dict[str, _Column] = {}
    records = 0
    for item in Lines(path, allow_partial_tail=False):  # the rollout reader's line checks
        if isinstance(item, Parsed):  # a line that is not a clean JSON object
            problem = item.problems[0]
            if problem.message == "blank line":
                continue
            if problem.message == "not a JSON object":
                raise InputError(f"{path}: line {problem.line}: a record must be a JSON object, "
                                 f"got {problem.got}")
            raise InputError(f"{path}: {problem}")
        number, record = item
        records += 1
        try:
            for key, value in record.items():
                columns.setdefault(key, _Column()).add(value)
        except RecursionError:
            raise InputError(f"{path}: line {number}: objects nested too deeply to infer a "
                             f"schema") from None
        if len(columns) > MAX_FIELDS:
            raise InputError(f"{path}: line {number}: more than {MAX_FIELDS} distinct keys "
                             f"(MAX_FIELDS): a schema that large is refused by diff")
    if not records:
        raise InputError(f"{path}: no records")
    varying: set[str] = set()
    doc = _schema_head(path, "rollout_step" if "episode_id" in columns else None)
    try:
        doc["properties"] = {k: _with_role(k, c.schema(k, varying)) for k, c in columns.items()}
    except RecursionError:
        raise InputError(f"{path}: objects nested too deeply to infer a schema") from None
    doc["required"] = [k for k, c in columns.items() if c.count == records]
    doc["additionalProperties"] = False
    if varying:
        doc["x-gyre-varying-dims"] = sorted(varying)
    return doc, {k: c.count for k, c in columns.items()}, records


def _with_role(name: str, body: dict[str, Any]) -> dict[str, Any]:
    match = resolve_role(name)
    if match.how in ("synonym", "normalised") and not match.ambiguous:
        body["x-gyre-role"] = match.role
    return body


def _infer_npz(path: Path) -> dict[str, Any]:
    arrays = npz_headers(path)
    if not arrays:
        raise InputError(f"{path}: no arrays")
    lead = _common_lead([shape for _, shape in arrays.values()])
    batch = ["B", "T"][:lead]
    doc = _schema_head(path, "train_batch")
    props: dict[str, Any] = {}
    for key, (dtype, shape) in arrays.items():
        name = "string" if dtype.kind == "U" else str(dtype)
        if name not in GYRE_DTYPES:
            raise InputError(f"{path}: array {key!r} has dtype {dtype}, not a contract dtype")
        dims: list[Dim] = [*batch[: min(lead, len(shape))], *shape[lead:]]
        body: dict[str, Any] = {"type": _json_type_of(name)}
        for dim in reversed(dims):
            body = {"type": "array", "items": body}
            if isinstance(dim, int):
                body["minItems"] = body["maxItems"] = dim
        body.update({"x-gyre-dtype": name, "x-gyre-shape": dims})
        props[key] = _with_role(key, body)
    doc["properties"] = props
    doc["required"] = list(arrays)
    doc["x-gyre-batch-dims"] = batch
    return doc


def npz_headers(path: str | Path) -> dict[str, tuple[Any, tuple[int, ...]]]:
    """{array name: (dtype, shape)} of an `.npz`, read from the `.npy` headers only.

    No array is decompressed (a 4 MB zip bomb may declare terabytes). A member that is not a
    `.npy`, a corrupt zip or a file that is not a zip at all raises InputError (exit 2).
    """
    import zlib

    from numpy.lib import format as npy

    arrays: dict[str, tuple[Any, tuple[int, ...]]] = {}
    refuse_devices(path, ".npz file")
    try:
        with open(path, "rb") as head:
            if head.read(len(npy.MAGIC_PREFIX)) == npy.MAGIC_PREFIX:
                raise InputError(f"{path}: cannot read as .npz: it holds one array (.npy), not a "
                                 "zip of arrays")
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                if member.is_dir():
                    continue
                if not member.filename.endswith(".npy"):
                    raise InputError(f"{path}: cannot read as .npz: member "
                                     f"{member.filename!r} is not a .npy array")
                with archive.open(member) as handle:
                    if handle.read(len(npy.MAGIC_PREFIX)) != npy.MAGIC_PREFIX:
                        name = member.filename.removesuffix(".npy")
                        raise InputError(f"{path}: cannot read as .npz: member {name!r} is not "
                                         "a .npy array")
                    handle.seek(0)
                    version = npy.read_magic(handle)
                    if version not in ((1, 0), (2, 0)):
                        raise ValueError(f"member {member.filename!r}: .npy format version "
                                         f"{version} is not supported (1.0 and 2.0 are)")
                    if version == (1, 0):
                        shape, _, dtype = npy.read_array_header_1_0(handle)
                    else:
                        shape, _, dtype = npy.read_array_header_2_0(handle)
                arrays[member.filename[: -len(".npy")]] = (dtype, tuple(shape))
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise InputError(f"is a directory, not an .npz file: {path}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError,
            RuntimeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: cannot read as .npz: {reason}") from None
    return arrays


def _common_lead(shapes: list[tuple[int, ...]]) -> int:
    """How many leading dims all arrays share (0, 1 or 2): they are the batch dims."""
    firsts = {s[0] for s in shapes if len(s) >= 1}
    if len(firsts) != 1 or any(len(s) == 0 for s in shapes):
        return 0
    seconds = {s[1] for s in shapes if len(s) >= 2}
    return 2 if len(seconds) == 1 and sum(len(s) >= 2 for s in shapes) >= len(shapes) / 2 else 1


def _json_type_of(dtype: str) -> str:
    if dtype == "bool":
        return "boolean"
    if dtype == "string":
        return "string"
    return "integer" if dtype.startswith(("int", "uint")) else "number"
