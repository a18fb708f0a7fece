"""The tensor field for Pydantic v2, written as `Annotated` metadata (the `pydantic.Field` idiom)::

    observation: Annotated[np.ndarray, Tensor("float32", [4], role="observation")]
    reward: Annotated[float, Tensor("float32", [], role="reward")]

`Tensor(...)` returns the field's `TensorSpec`, which validates and describes the value; the type
before it is what a type checker sees: what a validated value is. Scalars (shape `[]`) are checked
inside pydantic-core and yield plain Python values (`bool`, `int`, `float`, `str`); anything with
dims yields a numpy array of the declared dtype. Both reject lossy casts (see `dims`).
`check_annotation` holds the two together when a model class is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import numpy as np
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from gyre_contract.core._dims import (
    DTYPES,
    EMPTY_STRING,
    FLOAT_DTYPES,
    FLOAT_EXACT_INT,
    FLOAT_MAX,
    INT_RANGES,
    NON_EMPTY,
    CastError,
    Dim,
    Shape,
    expected_text,
    format_shape,
    parse_shape,
    scalar_reason,
    shape_mismatch,
    to_array,
)
from gyre_contract.core._errors import SchemaError, describe

ERROR_TYPE = "gyre"


def gyre_error(reason: str, expected: str, got: str) -> PydanticCustomError:
    """The one pydantic error type this package raises; `validate` turns it into a Problem."""
    return PydanticCustomError(
        ERROR_TYPE, "{reason}: expected {expected}, got {got}",
        {"reason": reason, "expected": expected, "got": got},
    )


@dataclass(frozen=True)
class TensorSpec:
    """What a tensor field holds: dtype (one name or a choice), shape, role, description."""

    dtype: str | tuple[str, ...]
    shape: Shape
    role: str | None = None
    description: str = ""
    finite: bool = True

    def __post_init__(self) -> None:
        for name in self.dtypes:
            if name not in DTYPES:
                raise SchemaError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")

    @property
    def dtypes(self) -> tuple[str, ...]:
        return (self.dtype,) if isinstance(self.dtype, str) else self.dtype

    @property
    def is_scalar(self) -> bool:
        return not self.shape and isinstance(self.dtype, str)

    @property
    def expected(self) -> str:
        return expected_text(self.dtype, self.shape)

    @property
    def python_type(self) -> type:
        """What a validated value is: `bool`, `int`, `float` or `str` for a scalar, else an
        ndarray (a numpy scalar where the shape allows zero dims: `*act` given a scalar)."""
        if not isinstance(self.dtype, str) or self.shape:
            return np.ndarray
        if self.dtype in ("bool", "string"):
            return bool if self.dtype == "bool" else str
        return float if self.dtype in FLOAT_DTYPES else int

    def validate(self, value: Any) -> np.ndarray:
        """Lossless conversion to the declared dtype, then rank and fixed-dim checks."""
        arr = self._convert(value)
        why = shape_mismatch(self.shape, arr.shape)
        if why:
            raise gyre_error(why, self.expected, describe(arr))
        return arr[()] if arr.ndim == 0 else arr  # a 0-d result is a numpy scalar

    def _convert(self, value: Any) -> np.ndarray:
        dtypes = self.dtypes
        try:
            if len(dtypes) == 1:
                return to_array(value, dtypes[0], self.finite)
            return to_array(value, _pick_dtype(value, dtypes), self.finite)
        except CastError as err:
            raise gyre_error(err.reason, self.expected, err.got) from None

    # -- pydantic hooks --------------------------------------------------------------------
    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        if not self.shape and isinstance(self.dtype, str):
            return scalar_core_schema(self.dtype, self.expected)
        return core_schema.no_info_plain_validator_function(
            self.validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _to_jsonable, when_used="json"
            ),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        return self.json_schema()

    def json_schema(self, defs: dict[str, Any] | None = None) -> dict[str, Any]:
        """Nested arrays with minItems = maxItems for fixed dims, plus the x-gyre keys."""
        body = _leaf_schema(self.dtypes)
        if self.is_scalar and self.dtype == "string":
            body["minLength"] = 1
        if any(d.variadic for d in self.shape) and defs is not None:
            body = _nested_any_depth(self, body, defs)
        else:
            for dim in reversed(self.shape):
                if dim.variadic:
                    body = {}
                    continue
                body = _array_of(body, dim)
        if self.description:
            body["description"] = self.description
        body["x-gyre-dtype"] = self.dtype if isinstance(self.dtype, str) else list(self.dtype)
        body["x-gyre-shape"] = [d.to_json() for d in self.shape]
        if self.role:
            body["x-gyre-role"] = self.role
        return body


def _pick_dtype(value: Any, dtypes: tuple[str, ...]) -> str:
    """For a choice like int64-or-float32, integers become the int and floats the float."""
    kind = value.dtype.kind if isinstance(value, (np.ndarray, np.generic)) else None
    if kind is None:
        probe = value
        while isinstance(probe, (list, tuple)) and probe:
            probe = probe[0]
        is_int = isinstance(probe, int) and not isinstance(probe, bool)
        kind = "i" if is_int else "f"
    wanted = [d for d in dtypes if (d in FLOAT_DTYPES) == (kind == "f")]
    return wanted[0] if wanted else dtypes[0]


def _to_jsonable(value: Any) -> Any:
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value


def _leaf_schema(dtypes: tuple[str, ...]) -> dict[str, Any]:
    leaves = [_scalar_json(d) for d in dtypes]
    return leaves[0] if len(leaves) == 1 else {"anyOf": leaves}


def _scalar_json(dtype: str) -> dict[str, Any]:
    if dtype == "bool":
        return {"type": "boolean"}
    if dtype == "string":
        return {"type": "string"}
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        return {"type": "integer", "minimum": lo, "maximum": hi}
    top = FLOAT_MAX[dtype]
    return {"type": "number", "minimum": -top, "maximum": top}


def _array_of(items: dict[str, Any], dim: Dim) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "items": items}
    if dim.size is not None:
        out["minItems"] = dim.size
        out["maxItems"] = dim.size
    return out


def _nested_any_depth(spec: TensorSpec, leaf: dict[str, Any], defs: dict[str, Any]
                      ) -> dict[str, Any]:
    """`*name` admits any depth: a recursive `$defs` entry of leaf-or-array-of-itself."""
    name = "nested_" + "_or_".join(spec.dtypes)
    defs.setdefault(name, {"anyOf": [leaf, {"type": "array",
                                            "items": {"$ref": f"#/$defs/{name}"}}]})
    at = next(i for i, d in enumerate(spec.shape) if d.variadic)
    body: dict[str, Any] = {"$ref": f"#/$defs/{name}"}
    if at < len(spec.shape) - 1:
        body = {}  # dims after *name: a plain validator cannot pin them
    for dim in reversed(spec.shape[:at]):
        body = _array_of(body, dim)
    return body


def Tensor(
    dtype: str | Sequence[str],
    shape: Sequence[int | str] | str = (),
    *,
    role: str | None = None,
    description: str = "",
    finite: bool = True,
) -> TensorSpec:
    """The spec of a tensor field of `dtype` and `shape`, for `Annotated[<type>, Tensor(...)]`.

    `finite=False` admits NaN/inf (batch padding); the batch rules then check finiteness
    under the mask instead.
    """
    dtypes = dtype if isinstance(dtype, str) else tuple(dtype)
    return TensorSpec(dtypes, parse_shape(shape), role, description, finite)


def tensor_annotation(spec: TensorSpec) -> Any:
    """`Annotated[<python type>, spec]`: the annotation of a field built in code."""
    return Annotated[spec.python_type, spec]


def check_annotation(name: str, annotation: Any, metadata: Sequence[Any]) -> TensorSpec | None:
    """The field's TensorSpec, once its annotation is known to say what the spec yields.

    Raises SchemaError where a type checker would be told something false: a scalar spec under
    `np.ndarray`, an array spec under `float`, or `Annotated[...] | None` (the union hides the
    spec from pydantic: the field would take null and lose its dtype and shape).
    """
    spec = tensor_spec_of(metadata)
    if spec is None:
        for member in _members(annotation):
            if get_origin(member) is Annotated and tensor_spec_of(member.__metadata__):
                raise SchemaError(
                    f"field {name!r}: `Annotated[...] | None` hides the Tensor from pydantic; "
                    "write the None inside: `Annotated[np.ndarray | None, Tensor(...)] = None`")
        return None
    wanted = spec.python_type
    for member in _members(annotation):
        if not _fits(member, wanted):
            shown = getattr(member, "__name__", None) or repr(member)
            raise SchemaError(
                f"field {name!r}: Tensor({spec.expected}) yields {wanted.__name__} values, "
                f"annotated {shown}; write Annotated[{_spelled(wanted)}, Tensor(...)]")
    return spec


def _members(annotation: Any) -> list[Any]:
    """The members of a union (`X | None`, `Optional[X]`) other than None; else the annotation."""
    if isinstance(annotation, UnionType) or get_origin(annotation) is Union:
        return [m for m in get_args(annotation) if m is not NoneType]
    return [annotation]


def _fits(member: Any, wanted: type) -> bool:
    if member is Any or member is object:
        return True
    if wanted is not np.ndarray:
        return member is wanted
    origin = get_origin(member) or member  # npt.NDArray[np.float32] is an ndarray[...]
    return isinstance(origin, type) and issubclass(origin, (np.ndarray, np.generic))


def _spelled(wanted: type) -> str:
    return "np.ndarray" if wanted is np.ndarray else wanted.__name__


def tensor_spec_of(metadata: Sequence[Any]) -> TensorSpec | None:
    for item in metadata:
        if isinstance(item, TensorSpec):
            return item
    return None


# -- scalars, checked in pydantic-core ------------------------------------------------------

_NUMPY_KINDS = {"bool": (np.bool_,), "string": (np.str_,)}


def scalar_core_schema(dtype: str, expected: str) -> core_schema.CoreSchema:
    """Fast path: a strict core schema for Python values, a fallback for numpy scalars."""
    fast = _strict_scalar(dtype)
    numpy_types = _NUMPY_KINDS.get(dtype, (np.integer, np.floating, np.bool_))

    def from_numpy(value: Any) -> Any:
        plain = value.item()
        why = scalar_reason(plain, dtype)
        if why:
            raise gyre_error(why, NON_EMPTY if why == EMPTY_STRING else expected, describe(value))
        return float(plain) if dtype in FLOAT_DTYPES else plain

    slow = core_schema.chain_schema([
        core_schema.is_instance_schema(numpy_types),
        core_schema.no_info_plain_validator_function(from_numpy),
    ])
    return core_schema.union_schema(
        [fast, slow], custom_error_type=ERROR_TYPE + "_scalar",
        custom_error_message=f"expected {expected}",
        serialization=core_schema.plain_serializer_function_ser_schema(
            _to_jsonable, when_used="json"),
    )


def _strict_scalar(dtype: str) -> core_schema.CoreSchema:
    if dtype == "bool":
        return core_schema.bool_schema(strict=True)
    if dtype == "string":
        return core_schema.str_schema(strict=True, min_length=1)
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        return core_schema.int_schema(strict=True, ge=lo, le=hi)
    return _exact_float(dtype)


def _exact_float(dtype: str) -> core_schema.CoreSchema:
    """A finite float within the dtype's range, or an integer the dtype holds exactly
    (|i| <= 2**24 for float32) as that float. pydantic-core's strict float takes any int, and
    `reward: 16777217` would be 16777216.0 in float32: `dims.scalar_reason` says why not."""
    top = FLOAT_MAX[dtype]
    exact = FLOAT_EXACT_INT[dtype]
    floats = core_schema.chain_schema([core_schema.is_instance_schema(float),
                                       core_schema.float_schema(strict=True, allow_inf_nan=False,
                                                                ge=-top, le=top)])
    ints = core_schema.chain_schema([
        core_schema.int_schema(strict=True, ge=-exact, le=exact),
        core_schema.float_schema(strict=True)])
    return core_schema.union_schema([floats, ints], mode="left_to_right")


def shape_text(spec: TensorSpec) -> str:
    return format_shape(spec.shape)
