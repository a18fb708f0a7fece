"""Rollout files: JSON Lines and Parquet sources, episode assembly, file reports, shards on Ray Data.

Its modules are private (`_lines.py`, ...); low to high (each imports only those above it):
- `lines` (the JSON Lines line reader and its hygiene), `arrowschema` (the Arrow layout of a
  model), `episodes` (`Episode`), `groups` (the file-level warnings on `group_id` groups),
  `report` (`FileReport`, problem groups, field table), `jsonfile` (one JSON document);
- `fastfile` (bulk decoding of JSON Lines blocks), `assembly` (the one episode assembler),
  `binding` (a bulk plan bound from a file's first lines, for an unpinned model),
  `checking` (the one validate → track loop every source goes through), `columnar` (a whole
  file as columns over its steps), `blocks` (blocks of records held in memory, validated at
  once: a channel's `put`);
- `parquet` (writing Parquet; its rows as a record source), `schemamode` (JSON Schema checks);
- `writer` (`write_steps`), `reading` (`read_steps`, `read_episodes`), `validation`
  (`validate_file`), `show` (one episode step by step), `shards` (many files, locally or on
  Ray Data).

Names load on first use (PEP 562): Parquet and Ray are imported only by what needs them.
"""

from gyre_contract.core._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "._writer": ("write_steps",),
    "._reading": ("read_steps", "read_episodes"),
    "._validation": ("validate_file",),
    "._episodes": ("Episode",),
    "._report": ("FileReport",),
    "._shards": ("validate_shards",),
    "._dataset": ("validate_dataset", "iter_train_batches"),
})
