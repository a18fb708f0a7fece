"""Shape rules: whether two per-step shapes can describe the same arrays, and what turns one into
the other (a trailing dim of 1 added or dropped, a varying dim padded).

A dim is a fixed size (`3`), a name (`A`, matching any size), `?` (any size) or a variadic
`*name` (zero or more dims). Shared by the diff (docs/contract.md §6) and compat.
"""

from __future__ import annotations

from dataclasses import dataclass

from gyre_contract.schema._fieldtable import UNKNOWN_DIM, Dim, shape_text


def is_variadic(dim: Dim) -> bool:
    """A `*name` dim: zero or more dims of any size."""
    return isinstance(dim, str) and dim.startswith("*")


def dims_match(a: Dim, b: Dim) -> bool:
    """Two fixed sizes must be equal; a name or an unknown size matches any size."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return True


def shapes_match(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> bool:
    """Whether two per-step shapes can describe the same arrays (names match any size)."""
    if not any(map(is_variadic, a)) and not any(map(is_variadic, b)):
        return len(a) == len(b) and all(dims_match(x, y) for x, y in zip(a, b))
    return _match_variadic(a, b)


def _match_variadic(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> bool:
    if not a or not b:
        rest = a or b
        return all(map(is_variadic, rest))
    if is_variadic(a[0]):
        return _match_variadic(a[1:], b) or _match_variadic(a, b[1:])
    if is_variadic(b[0]):
        return _match_variadic(a, b[1:]) or _match_variadic(a[1:], b)
    return dims_match(a[0], b[0]) and _match_variadic(a[1:], b[1:])


def static_rank(shape: tuple[Dim, ...] | None) -> int | None:
    """The number of dims, None when unknown or variadic."""
    if shape is None or any(map(is_variadic, shape)):
        return None
    return len(shape)


def strip_batch_dims(shape: tuple[Dim, ...] | None, batch: tuple[str, ...]
                     ) -> tuple[tuple[Dim, ...] | None, int]:
    """Per-step shape of a field of a batched schema, and how many leading batch dims it had."""
    if shape is None or not batch:
        return shape, 0
    named = any(isinstance(d, str) and d != UNKNOWN_DIM and not d.startswith("*") for d in shape)
    n = 0
    while n < len(batch) and n < len(shape):
        d = shape[n]
        if isinstance(d, str) and d.startswith("*"):
            break
        if named and d != batch[n]:
            break
        n += 1
    return shape[n:], n


@dataclass(frozen=True, slots=True)
class ShapeFit:
    """How one per-step shape becomes another: `ok`, the op (None: as is), and why."""

    ok: bool
    op: str | None = None  # unsqueeze | squeeze | pad
    why: str = ""


def compare_shape(s: tuple[Dim, ...] | None, t: tuple[Dim, ...] | None,
                  varying: tuple[str, ...] = (), *, unknown_as_one: bool = False) -> ShapeFit:
    """Per-step shapes: equal, a trailing singleton to add/remove, a varying dim to pad, or not.

    `unknown_as_one`: a trailing dim of no fixed size may be a new dim of 1 (the diff asks it
    for actions: SB3 reads a Discrete action as `[M, 1]`, its schema says `[M, ?]`)."""
    if s is None or t is None:
        return ShapeFit(True)
    if shapes_match(s, t):
        if varying and not all(is_variadic(d) for d in s if d in varying):
            return ShapeFit(True, "pad", f"pad varying dim {', '.join(varying)} to the batch "
                            f"maximum (collate adds its own mask)")
        return ShapeFit(True)
    if t and t[-1] == 1 and shapes_match(s, t[:-1]) and not (s and is_variadic(s[-1])):
        return ShapeFit(True, "unsqueeze", "add a trailing dim of 1")
    if unknown_as_one and t and t[-1] == UNKNOWN_DIM and shapes_match(s, t[:-1]) and \
            not (s and is_variadic(s[-1])):
        return ShapeFit(True, "unsqueeze", "add a trailing dim of 1 (the trainer's last dim "
                        "has no fixed size; a scalar per step becomes [1], as SB3 reads a "
                        "Discrete action [M, 1])")
    if s and s[-1] == 1 and shapes_match(s[:-1], t):
        return ShapeFit(True, "squeeze", "drop the trailing dim of 1")
    return ShapeFit(False, why=f"per-step shape {shape_text(s)} cannot become {shape_text(t)}")
