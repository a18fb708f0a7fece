"""The trainer side: the field map and its ops, collation into padded batches, advantages, inspection.

Names load on first use (PEP 562). `collate` here is the function.
"""

from gyre_contract.core.deprecation import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".fieldmap": ("FieldMap",),
    ".ops": ("register_op", "unregister_op", "known_ops"),
    ".collation": ("collate",),
    ".flatcollate": ("collate_file",),
    ".tokens": ("collate_tokens",),
    ".advantages": ("gae", "discounted_returns"),
    ".inspection": ("inspect_batch", "batch_schema"),
})
