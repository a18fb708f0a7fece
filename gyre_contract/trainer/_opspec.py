"""What an op is (docs/field-map.md): the `Op` record the registry in `gyre_contract.trainer._ops`
holds, the types of its parts, and how an argument reads in a message or a run note.

Kept apart from the registry so that a module of built-in ops (`tokenops`) can define its `Op`
records without importing the registry that lists them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

OpFunction = Callable[..., Any]
"""`fn(inputs: list[np.ndarray], columns: Mapping[str, Any], **args) -> np.ndarray`."""

ArgCheck = Callable[[Any], str | None]
"""Returns why an argument value is wrong, or None when it is fine."""

Describer = Callable[[str, "tuple[str, ...]", Mapping[str, Any]], str]
"""`describe(target, sources, args) -> str`: what an op does to make `target`, in plain terms
("done ← terminated OR truncated"); "" when there is nothing worth saying (a same-name rename)."""

Reads = Callable[["tuple[str, ...]"], "tuple[str, ...]"]
"""`reads(sources) -> column names`: the columns an op reads besides its sources (a token op's
`response_mask`), given the names of its sources (`()` for a `then` step)."""


@dataclass(frozen=True)
class Op:
    """One registered op: its function, how many sources it takes, its arguments.

    `sources` is "one", "many" (a list of at least one), "none", or a tuple naming each source
    position (a fixed-length list). `args` maps each argument to its check; `required` lists the
    ones a map must give. `args=None` accepts any arguments (ops registered without a signature).
    `describe` says in plain terms what the op makes (the run notes, `FieldMap.describe`); an op
    without one is described by its name, sources and arguments. `reads` names the columns the op
    reads besides its sources, so that they are collated too. A `named` op's function also gets
    `sources=` (the names of its sources, e.g. to find a column's mask by its name); such an op
    needs a named source and so cannot be a `then` step. `sparse` lists the positions of sources
    that only some steps carry (`next`'s final observation): they are collated with a
    `<name>_present` mask instead of being required on every step. `groups`: the function takes
    groups of modalities itself (a dict per source), instead of being refused them.
    """

    name: str
    fn: OpFunction
    sources: str | tuple[str, ...] = "one"
    args: Mapping[str, ArgCheck] | None = field(default_factory=dict)
    required: tuple[str, ...] = ()
    builtin: bool = False
    describe: Describer | None = None
    reads: Reads | None = None
    named: bool = False
    sparse: tuple[int, ...] = ()
    groups: bool = False

    def text(self, target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
        """What this op does to make `target` from `sources` with `args`, in plain terms."""
        if self.describe is not None:
            return self.describe(target, sources, args)
        listed = [*sources, *(f"{k}={number_text(v)}" for k, v in args.items())]
        return f"{target} ← {self.name}({', '.join(listed)})"

    def columns_read(self, sources: tuple[str, ...]) -> tuple[str, ...]:
        """The columns this op reads besides `sources` (none unless it declares `reads`)."""
        return self.reads(sources) if self.reads is not None else ()


def number_text(value: Any) -> str:
    """A map argument as a person reads it: 0.99, not 0.9900000000000001; strings as JSON."""
    if isinstance(value, float):
        return f"{value:g}"
    return value if isinstance(value, str) else json.dumps(value)
