"""Arrow arrays as numpy arrays, without pyarrow's pandas probe.

Why: pyarrow asks whether pandas is installed, and imports it, the first time it converts an array
to numpy (`Array.to_numpy`, `np.asarray`) or a Python value to Arrow (`pa.array`, `pa.scalar`,
a compute function given a Python number): about 140 ms and 40 MB for `validate` or `batch`,
more than reading a 200,000-line file's columns. The columns the bulk paths read are plain
numbers, booleans and dictionary codes, whose buffers numpy can view as they are; anything else
(nulls, other types) goes through `to_numpy` as before. pyarrow is never imported here: the
arrays come from the callers, which import it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_NUMBERS = {name: name for name in ("int8", "int16", "int32", "int64",
                                     "uint8", "uint16", "uint32", "uint64")}
_NUMBERS.update({"halffloat": "float16", "float": "float32", "double": "float64"})
"""numpy dtypes of the Arrow number types, by the Arrow type's name."""


def numpy_of(array: Any) -> np.ndarray:
    """The values of a pyarrow Array (not chunked) as numpy: a view of its buffer for numbers
    without nulls, booleans unpacked from their bits; else `to_numpy(zero_copy_only=False)`."""
    n, offset = len(array), array.offset
    if array.null_count == 0:
        name = str(array.type)
        if name == "bool":
            bits = array.buffers()[1]
            if bits is None or n == 0:
                return np.zeros(n, bool)
            first, last = offset // 8, (offset + n + 7) // 8
            unpacked = np.unpackbits(np.frombuffer(bits, np.uint8, last - first, first),
                                     bitorder="little")
            start = offset - 8 * first
            return unpacked[start:start + n].view(bool)
        dtype = _NUMBERS.get(name)
        if dtype is not None:
            data = array.buffers()[1]
            if data is None or n == 0:
                return np.zeros(0, dtype)
            return np.frombuffer(data, dtype, n, offset * np.dtype(dtype).itemsize)
    return np.asarray(array.to_numpy(zero_copy_only=False))


def valid_mask(array: Any) -> np.ndarray:
    """Which entries of a pyarrow Array are not null, as numpy booleans."""
    return numpy_of(array.is_valid())
