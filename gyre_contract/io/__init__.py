"""Rollout files: JSON Lines and Parquet sources, episode assembly, file reports, shards on Ray Data.

Modules, low to high (each imports only those above it):
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

from gyre_contract.core.deprecation import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".writer": ("write_steps",),
    ".reading": ("read_steps", "read_episodes"),
    ".columnar": ("read_columns", "FileColumns"),
    ".validation": ("validate_file",),
    ".show": ("show_episode", "EpisodeView"),
    ".episodes": ("Episode",),
    ".report": ("FileReport",),
    ".groups": ("FileWarning",),
    ".arrowschema": ("to_arrow_schema",),
    ".parquet": ("write_parquet", "read_parquet_steps", "read_parquet_episodes", "validate_parquet"),
    ".shards": ("validate_shards", "ShardsReport"),
    ".dataset": ("validate_dataset", "iter_train_batches"),
})
