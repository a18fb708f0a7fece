"""Rollout files: JSON Lines and Parquet sources, episode assembly, file reports, shards on Ray Data."""
