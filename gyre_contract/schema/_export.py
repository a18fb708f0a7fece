"""JSON Schema export (draft 2020-12): the files in `schemas/` that other repos consume.

The generator walks the models' tensor specs itself rather than relying on pydantic's generator,
so the output is stable, carries the `x-gyre-*` keys, and a plain validator in any language
enforces what JSON Schema can express (types, ranks, fixed dims, integer ranges, no nulls,
no unknown keys). What only gyre-contract checks: lossless float narrowing, bool-in-list, dim
binding across fields, logprob <= 0 for discrete actions, and every episode and batch rule.

The `x-gyre-*` keywords are annotations, declared by a vocabulary meta-schema written next to
the schemas (`gyre_vocabulary.v1.json`), so that a strict validator (ajv's default mode rejects
unknown keywords) can register them from it and check their form; see docs/contract.md §5.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from gyre_contract.core._dims import DTYPES
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import (
    AnyObservation,
    GyreModel,
    JsonScalars,
    Modalities,
    RolloutStepV1,
    TrainBatchV1,
)
from gyre_contract.core._tensor import TensorSpec, tensor_spec_of
from gyre_contract.core._tokens import TokenBatchV1
from gyre_contract.io._atomic import write_text_atomic

DRAFT = "https://json-schema.org/draft/2020-12/schema"
EXPORTED: tuple[type[GyreModel], ...] = (RolloutStepV1, TrainBatchV1, TokenBatchV1)
VOCABULARY_ID = "urn:gyre-contract:vocab:x-gyre:1"
"""The `$vocabulary` URI of the x-gyre keywords (annotations: not required to validate)."""
META_SCHEMA_ID = "urn:gyre-contract:meta:1"
"""The `$id` of the meta-schema declaring the x-gyre keywords (dialect: draft 2020-12 + x-gyre)."""
META_SCHEMA_FILE = "gyre_vocabulary.v1.json"
_DRAFT_VOCABULARIES = ("core", "applicator", "unevaluated", "validation", "meta-data",
                       "format-annotation", "content")


def schema_id(model: type[GyreModel]) -> str:
    """`urn:gyre-contract:<kind>:<major>`, plus the class name for a project's pinned subclass."""
    base = f"urn:gyre-contract:{model.gyre_kind}:{model.gyre_version.split('.')[0]}"
    return base if model in EXPORTED else f"{base}:{model.__name__}"


def file_name(model: type[GyreModel]) -> str:
    """`<kind>.v<major>.json`, the file `export_schemas` writes for `model`."""
    return f"{model.gyre_kind}.v{model.gyre_version.split('.')[0]}.json"


def json_schema(model: type[GyreModel]) -> dict[str, Any]:
    """The JSON Schema document of a step or batch model (ours or a pinned subclass)."""
    defs: dict[str, Any] = {}
    doc: dict[str, Any] = {
        "$schema": DRAFT,
        "$id": schema_id(model),
        "title": model.__name__,
        "description": _first_line(model.__doc__),
        "$comment": f"x-gyre-* keywords: annotations declared by {META_SCHEMA_FILE} "
                    f"({META_SCHEMA_ID}); register them in a strict validator (docs/contract.md §5)",
        "x-gyre-kind": model.gyre_kind,
        "x-gyre-version": model.gyre_version,
    }
    if model.batch_dims:
        doc["x-gyre-batch-dims"] = list(model.batch_dims)
    if model.varying_dims:
        doc["x-gyre-varying-dims"] = list(model.varying_dims)
    doc.update(_object_schema(model, defs))
    if defs:
        doc["$defs"] = dict(sorted(defs.items()))
    return doc


def gyre_keywords() -> dict[str, dict[str, Any]]:
    """Each x-gyre keyword our schemas and Parquet metadata use, with the JSON Schema of its value."""
    dtype = {"enum": list(DTYPES)}
    dims = {"type": "array", "items": {"type": "string", "minLength": 1}}
    return {
        "x-gyre-kind": {"type": "string", "minLength": 1,
                        "description": "the model's kind: rollout_step or train_batch"},
        "x-gyre-version": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+$",
                           "description": "the model's semver string"},
        "x-gyre-batch-dims": {**dims, "description": "a batch's leading dims, e.g. [B, T]"},
        "x-gyre-varying-dims": {**dims, "description": "dims that may change between steps"},
        "x-gyre-dtype": {"anyOf": [dtype, {"type": "array", "items": dtype, "minItems": 1}],
                         "description": "a dtype, or the list of accepted dtypes"},
        "x-gyre-shape": {"type": "array",
                         "items": {"anyOf": [{"type": "string", "minLength": 1},
                                             {"type": "integer", "minimum": 0}]},
                         "description": "the shape: dim names, fixed sizes, *rest"},
        "x-gyre-role": {"type": "string", "minLength": 1,
                        "description": "the field's role (docs/contract.md §2)"},
        "x-gyre-layout": {"enum": ["padded", "packed"],
                          "description": "a token trainer's layout: padded rows or packed "
                                         "micro-batch rows (docs/contract.md §7)"},
        "x-gyre-token-budget": {"type": "integer", "minimum": 1,
                                "description": "the tokens of one packed micro-batch row"},
    }


def vocabulary_schema() -> dict[str, Any]:
    """The meta-schema declaring the x-gyre keywords: draft 2020-12 plus their value schemas.

    `$vocabulary` lists the draft's vocabularies and ours with `false` (annotations only, so a
    validator that does not know it still validates); `$dynamicAnchor: meta` makes the keyword
    schemas apply to every subschema when a document is checked against this meta-schema.
    """
    vocabularies = {f"https://json-schema.org/draft/2020-12/vocab/{name}": True
                    for name in _DRAFT_VOCABULARIES}
    vocabularies[VOCABULARY_ID] = False
    return {
        "$schema": DRAFT,
        "$id": META_SCHEMA_ID,
        "$vocabulary": vocabularies,
        "$dynamicAnchor": "meta",
        "title": "gyre-contract x-gyre vocabulary, v1",
        "description": "JSON Schema draft 2020-12 plus the x-gyre-* annotation keywords of "
                       "gyre-contract's schemas (docs/contract.md §5).",
        "allOf": [{"$ref": DRAFT}],
        "properties": gyre_keywords(),
    }


def _object_schema(model: type[BaseModel], defs: dict[str, Any]) -> dict[str, Any]:
    names = model_info(model)
    properties: dict[str, Any] = {}
    for wire in names.wires:
        properties[wire] = _field_schema(wire, model.model_fields[names.attr(wire)], defs)
    required = [wire for wire in names.wires if wire in names.required]
    out: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if model.model_config.get("extra") == "forbid":
        out["additionalProperties"] = False
    return out


def _field_schema(wire: str, info: Any, defs: dict[str, Any]) -> dict[str, Any]:
    spec = tensor_spec_of(info.metadata)
    if isinstance(spec, TensorSpec):
        return _with_description(spec.json_schema(defs), info.description)
    for item in info.metadata:
        if isinstance(item, (AnyObservation, JsonScalars)):
            return _with_description(item.json_schema(defs), info.description)
    annotation = info.annotation
    if isinstance(annotation, type) and issubclass(annotation, Modalities):
        body = _object_schema(annotation, defs)
        body["x-gyre-role"] = "next_observation" if wire == "next_observation" else "observation"
        return _with_description(body, info.description)
    return _with_description(TypeAdapter(annotation).json_schema(), info.description)


def _with_description(body: dict[str, Any], description: str | None) -> dict[str, Any]:
    if description:
        return {"description": description, **{k: v for k, v in body.items()
                                                if k != "description"}}
    return body


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if text and text.strip() else ""


def render(doc: dict[str, Any]) -> str:
    """The exact text written to disk (stable key order, two-space indent, final newline)."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def export_schemas(
    out_dir: str | Path, models: tuple[type[GyreModel], ...] = EXPORTED
) -> list[Path]:
    """Write one file per model and the vocabulary meta-schema into `out_dir`, each replaced
    atomically; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in _documents(models):
        path = out / name
        write_text_atomic(path, text)  # a kill never leaves half a file
        written.append(path)
    return written


def _documents(models: tuple[type[GyreModel], ...]) -> list[tuple[str, str]]:
    docs = [(file_name(model), render(json_schema(model))) for model in models]
    return [*docs, (META_SCHEMA_FILE, render(vocabulary_schema()))]


def drifted_schemas(
    out_dir: str | Path, models: tuple[type[GyreModel], ...] = EXPORTED
) -> list[Path]:
    """Files in `out_dir` that are missing or differ from what the models generate now
    (the vocabulary meta-schema included).

    Compared as bytes, size first: a file that is not UTF-8, or huge, is simply drifted.
    """
    out = Path(out_dir)
    stale = []
    for name, text in _documents(models):
        path = out / name
        if not _same_bytes(path, text.encode("utf-8")):
            stale.append(path)
    return stale


def _same_bytes(path: Path, expected: bytes) -> bool:
    try:
        if not path.is_file() or path.stat().st_size != len(expected):
            return False
        return path.read_bytes() == expected
    except OSError:
        return False
