"""The trainer side: the field map and its ops, collation into padded batches, advantages, inspection."""
