"""Rollout files: JSON Lines and Parquet sources, episode assembly, file reports, shards on Ray Data.

Names load on first use (PEP 562): Parquet and Ray are imported only by what needs them.
"""

from gyre_contract.core.deprecation import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".rollout": ("write_steps", "read_steps", "read_episodes", "validate_file", "Episode",
                 "FileReport"),
    ".parquet": ("to_arrow_schema", "write_parquet", "read_parquet_steps",
                 "read_parquet_episodes", "validate_parquet"),
    ".shards": ("validate_shards", "validate_dataset", "iter_train_batches", "ShardsReport"),
})
