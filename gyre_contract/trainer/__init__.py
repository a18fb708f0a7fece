"""The trainer side: the field map and its ops, collation into padded batches, advantages, and a
trainer's schema from one of its batches (`batch_schema`).

Names load on first use (PEP 562). `collate` here is the function.
"""

from gyre_contract.core._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "._fieldmap": ("FieldMap",),
    "._ops": ("register_op",),
    "._collation": ("collate",),
    "._tokens": ("collate_tokens",),
    "._advantages": ("gae", "discounted_returns"),
    "._inspection": ("batch_schema",),
})
