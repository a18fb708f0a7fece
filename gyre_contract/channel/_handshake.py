"""The handshake: each end publishes its documents in the channel's manifest, and whichever end
opens second checks them against the other's before any data moves.

The manifest (`channel.json` on a folder; the actor's state on Ray) is one JSON object:

    {"gyre_channel": 1, "contract": "1.2", "created": 1733..., "id": "…",
     "sampler": {"fingerprint", "schema", "model", "opened"} | null,   # the current sampler
     "accepted": [{"fingerprint", "schema", "model", "since"}, ...],   # every accepted one
     "trainer": {"fingerprint", "map", "schema", "batch_dims", "opened", "epoch",
                 "version", "version_at"} | null}

A sampler publishes its step schema, a trainer its field map, its batch schema (or none: the
map's `TrainBatch` / `TokenBatch`) and batch dims; each with a fingerprint (sha256 of their
canonical JSON plus the contract version). The check runs the map against the sampler's schema:
every field the map reads must be one the sampler writes (or one collation derives: `mask`,
`episode_id`, `policy_version`, `next_value`; for token rows the prompt/response layout from
`observation.token_ids` and `action`), and every field the trainer's schema requires must be one
the map builds. A field the map reads that the sampler marks optional is a warning (a segment
without it fails at `get`). A sampler whose schema differs from the channel's current one is
compared with `compat` (backward mode: can records written under the old schema be read under
the new?): a compatible change (an optional field added) is accepted with a warning, a breaking
one refuses the open. A refusal is a `HandshakeError` (a `ContractError`, exit 2 in the CLI)
naming every field, raised before anything is written.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from gyre_contract.channel import _contract as contract
from gyre_contract.core._errors import ContractError, InputError, Problem

FORMAT = 1
"""The manifest format (`gyre_channel`)."""


class HandshakeError(ContractError):
    """The two ends' documents do not fit: refused at open, before any data moves (exit 2)."""

    exit_code = 2


class NotAChannelError(InputError):
    """A path or name that is not a channel (exit 2): its message names it."""


# -- documents ---------------------------------------------------------------------------------

def sampler_documents(model: Any) -> dict[str, Any]:
    """What a sampler publishes: its step schema, its model's name and their fingerprint."""
    schema = contract.step_schema(model)
    return {"schema": schema, "model": getattr(model, "__name__", str(model)),
            "fingerprint": contract.fingerprint({"step_schema": schema})}


def trainer_documents(fmap: Any, trainer: Any, batch_dims: Any) -> dict[str, Any]:
    """What a trainer publishes: its map, its batch schema (None: the map's batch model), its
    batch dims, and their fingerprint."""
    map_doc = fmap.to_dict()
    schema = None if trainer is None else contract.schema_document(trainer)
    dims = None if batch_dims is None else list(
        batch_dims.split(",") if isinstance(batch_dims, str) else batch_dims)
    documents = {"map": map_doc, "trainer_schema": schema, "batch_dims": dims}
    return {"map": map_doc, "schema": schema, "batch_dims": dims,
            "fingerprint": contract.fingerprint(documents)}


# -- the manifest ------------------------------------------------------------------------------

def new_manifest(now: float) -> dict[str, Any]:
    return {"gyre_channel": FORMAT, "contract": contract.CONTRACT_VERSION, "created": now,
            "id": uuid.uuid4().hex, "sampler": None, "accepted": [], "trainer": None}


def checked_manifest(data: Any, where: str) -> dict[str, Any]:
    """`data` when it is a channel manifest this version reads, else NotAChannelError."""
    if not isinstance(data, dict) or "gyre_channel" not in data:
        raise NotAChannelError(f"not a channel: {where} (no gyre_channel manifest)")
    if data["gyre_channel"] != FORMAT:
        raise NotAChannelError(f"{where}: channel format {data['gyre_channel']!r}; this "
                               f"gyre-contract reads format {FORMAT}")
    for key, kind in (("accepted", list), ("sampler", (dict, type(None))),
                      ("trainer", (dict, type(None)))):
        if not isinstance(data.get(key), kind):
            raise NotAChannelError(f"{where}: a damaged channel manifest ({key!r})")
    return data


def accepted_fingerprints(manifest: Mapping[str, Any]) -> list[str]:
    return [entry["fingerprint"] for entry in manifest.get("accepted", [])]


def join_sampler(manifest: dict[str, Any], docs: Mapping[str, Any], now: float) -> list[str]:
    """Publish a sampler in `manifest` (changed in place); its warnings, or HandshakeError."""
    warnings: list[str] = []
    known = {e["fingerprint"]: e for e in manifest["accepted"]}
    entry = known.get(docs["fingerprint"])
    if entry is None:
        current = manifest.get("sampler")
        if current is not None:
            warnings += _schema_change(current, docs)
        trainer = manifest.get("trainer")
        if trainer is not None:
            warnings += _raise_or_warn(_map_check(trainer, docs))
        entry = {"fingerprint": docs["fingerprint"], "schema": docs["schema"],
                 "model": docs["model"], "since": now}
        manifest["accepted"].append(entry)
    manifest["sampler"] = {"fingerprint": entry["fingerprint"], "schema": entry["schema"],
                           "model": entry["model"], "opened": now}
    return warnings


def join_trainer(manifest: dict[str, Any], docs: Mapping[str, Any], now: float) -> list[str]:
    """Publish a trainer in `manifest` (changed in place, its epoch one up: an earlier trainer
    end stops delivering); its warnings, or HandshakeError."""
    fmap = contract.load_map(docs["map"])
    problems: list[Problem] = []
    if docs["schema"] is not None:
        schema = contract.load_trainer(docs["schema"], docs["batch_dims"])
        problems += _unbuilt(fmap, schema)
    found: list[str] = []
    for entry in reversed(manifest["accepted"]):
        missing, optional = map_problems(fmap, contract.field_table(entry["schema"]))
        problems += missing
        found += optional
    warnings = _raise_or_warn((problems, found))
    previous = manifest.get("trainer") or {}
    manifest["trainer"] = {"fingerprint": docs["fingerprint"], "map": docs["map"],
                           "schema": docs["schema"], "batch_dims": docs["batch_dims"],
                           "opened": now, "epoch": int(previous.get("epoch", 0)) + 1,
                           "version": previous.get("version"),
                           "version_at": previous.get("version_at")}
    return warnings


def _raise_or_warn(found: tuple[list[Problem], list[str]]) -> list[str]:
    problems, warnings = found
    if problems:
        raise HandshakeError(_unique(problems))
    return list(dict.fromkeys(warnings))


def _unique(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.path, p.message) not in seen:
            seen.add((p.path, p.message))
            out.append(p)
    return out


def _map_check(trainer: Mapping[str, Any], docs: Mapping[str, Any]
               ) -> tuple[list[Problem], list[str]]:
    return map_problems(contract.load_map(trainer["map"]), contract.field_table(docs["schema"]))


def _schema_change(current: Mapping[str, Any], docs: Mapping[str, Any]) -> list[str]:
    report = contract.compat(current["schema"], docs["schema"], "backward")
    if not report.ok:
        raise HandshakeError([Problem(
            f"sampler.{c.field}", "a backward-compatible change of the step schema (records "
            "already in the channel stay readable)", c.message,
            f"the sampler's schema changed ({c.rule}); open a new channel for it")
            for c in report.breaking])
    changes = "; ".join(f"{c.field}: {c.message}" for c in report.changes) or "documents"
    return [f"the sampler's schema changed compatibly ({report.summary_line()}): {changes}; "
            f"fingerprint {current['fingerprint'][:19]}… → {docs['fingerprint'][:19]}…"]


# -- the map against the sampler's schema ------------------------------------------------------

def map_problems(fmap: Any, sampler: Any) -> tuple[list[Problem], list[str]]:
    """(every field the map reads that the sampler never writes, warnings for those it writes
    only sometimes), per target field of the map."""
    names = set(sampler.names())
    groups = {name.rsplit(".", i)[0] for name in names for i in range(1, name.count(".") + 1)}
    problems: list[Problem] = []
    optional: dict[str, list[str]] = {}
    for target, spec in fmap.fields.items():
        reads = type(fmap)({target: spec}, layout=fmap.layout).sources()
        for source in reads:
            needs = fmap.layout.needs(source)  # a column the map's row layout makes itself
            if needs is not None:
                for need in needs:
                    if not any(n in names and (not need.integer or _integer(sampler[n]))
                               for n in need.names):
                        problems.append(_never_written(target, source, need.names[0], sampler))
                continue
            if source in names:
                if not sampler[source].required:
                    optional.setdefault(source, []).append(target)
                continue
            if source in groups:
                continue
            problems.append(_never_written(target, source, source, sampler))
    if not optional:
        return problems, []
    listed = "; ".join(f"{source} (for {', '.join(targets)})"
                       for source, targets in optional.items())
    return problems, [f"the map reads fields the sampler's schema marks optional: {listed}; "
                      f"a segment whose steps lack one fails at get (MissingFieldError)"]


def _integer(f: Any) -> bool:
    """Whether a field holds integers (token ids), as far as its schema says."""
    dtypes = f.dtype if isinstance(f.dtype, tuple) else (f.dtype,)
    return any(isinstance(d, str) and d.startswith(("int", "uint")) for d in dtypes)


def _never_written(target: str, source: str, name: str, sampler: Any) -> Problem:
    what = f"{source}, made from {name}" if name != source else source
    return Problem(f"map.fields.{target}", f"a field {name!r} of the sampler's records",
                   f"not in the sampler's schema ({_short(sampler.names())})",
                   f"the map reads {what}, which the sampler never writes")


def _short(names: list[str]) -> str:
    shown = ", ".join(names[:8])
    return shown + (f", … ({len(names)} fields)" if len(names) > 8 else "")


def _unbuilt(fmap: Any, schema: Any) -> list[Problem]:
    """The trainer's required fields the map does not build."""
    built = set(fmap.fields)
    return [Problem(f"trainer.{f.name}", "a field the map builds", "no such map field",
                    "the trainer's schema requires it; the map builds no such key")
            for f in schema.table if f.required and f.name not in built
            and not any(b.startswith(f"{f.name}.") for b in built)]
