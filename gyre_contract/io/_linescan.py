"""Counting what a JSON line holds without parsing it: values, keys, nesting, in bounded memory.

Why: parsing makes a Python object per value and a string per key (`[],` is 3 bytes on the
wire and 64 bytes parsed; a million keys take a second and 100 MB to parse), so a line's limits
are checked on its bytes first: `lines.MAX_LINE_VALUES` before any parse, `lines.MAX_RECORD_KEYS`
before the parse when the line is surely JSON that the parser would take (`surely_json`), so the
refusal costs a scan of the bytes and never the objects.

The scan reads the line in blocks of 64 KiB (numpy over each block, a few arrays of its
size). Inside a string a backslash always starts a pair (`\\\\`, `\\"`, `\\n`, `\\u0041`, ...): removing
every two-backslash pair, then every backslash-quote pair, leaves only the quotes that open or
close strings, and a character is outside strings when an even number of those precede it. A
block never ends inside a run of backslashes, so no pair is split between blocks.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

import msgspec
import numpy as np

BLOCK_BYTES = 2**16
"""Bytes of a line scanned at a time (a few arrays of this size: about 3 MB at once, and faster
than larger blocks, which fall out of the CPU cache)."""
MAX_PARSE_DEPTH = 1024
"""The deepest nesting orjson parses (`nested too deeply` beyond)."""

_QUOTE, _COMMA, _COLON = 0x22, 0x2C, 0x3A
_OPEN_LIST, _CLOSE_LIST, _OPEN_OBJECT, _CLOSE_OBJECT = 0x5B, 0x5D, 0x7B, 0x7D
_MARKS = (_QUOTE, _COMMA, _COLON, _OPEN_LIST, _CLOSE_LIST, _OPEN_OBJECT, _CLOSE_OBJECT)


@dataclass(frozen=True, slots=True)
class Counts:
    """What a scan of one line found outside strings."""

    values: int
    """`,` `:` `[` `{`: about one per value, two per object member (`lines.MAX_LINE_VALUES`)."""
    keys: int
    """`:` inside objects only (no list around them): the keys of the record and of the objects
    it nests, as written (a duplicate key counts each time; `lines.MAX_RECORD_KEYS`)."""
    depth: int
    """The deepest nesting of lists and objects."""
    top: int
    """`:` at the first level: the keys of the line's own object, as written."""


def _blocks(raw: bytes) -> list[tuple[int, int]]:
    """(start, end) of each block: about BLOCK_BYTES, never ending inside a run of backslashes
    (a backslash at the end takes the character it escapes with it)."""
    out, start, size = [], 0, len(raw)
    while start < size:
        end = min(size, start + BLOCK_BYTES)
        while end < size and raw[end - 1] == 0x5C:
            end += 1
        out.append((start, end))
        start = end
    return out


def scan(raw: bytes) -> Counts:
    """Count `raw`'s values, keys and nesting outside strings (see the module doc)."""
    values = keys = deepest = top = 0
    inside = lists = depth = 0  # carried from block to block
    for start, end in _blocks(raw):
        block = raw[start:end]
        if b"\\" in block:
            block = block.replace(b"\\\\", b"").replace(b'\\"', b"")
        codes = np.frombuffer(block, np.uint8)
        mask = codes == _QUOTE
        for mark in _MARKS[1:]:
            mask |= codes == mark
        marked = codes[mask]  # quotes and structural characters, in order
        if not len(marked):
            continue
        quotes = marked == _QUOTE
        opened = np.cumsum(quotes, dtype=np.int32)
        outside = ((opened & 1) == inside) & ~quotes
        inside ^= int(opened[-1]) & 1
        found = marked[outside]
        if not len(found):
            continue
        colon = found == _COLON
        open_list, close_list = found == _OPEN_LIST, found == _CLOSE_LIST
        opens = open_list | (found == _OPEN_OBJECT)
        values += int(np.count_nonzero(opens | colon | (found == _COMMA)))
        in_lists = lists + np.cumsum(open_list.astype(np.int32) - close_list)
        keys += int(np.count_nonzero(colon & (in_lists == 0)))
        lists = int(in_lists[-1])
        levels = depth + np.cumsum(opens.astype(np.int32) - (close_list | (found == _CLOSE_OBJECT)))
        deepest = max(deepest, int(levels.max()))
        top += int(np.count_nonzero(colon & (levels == 1)))
        depth = int(levels[-1])
    return Counts(values, keys, deepest, top)


class _Anything(msgspec.Struct):
    """An object whose members are all skipped: msgspec checks their syntax, makes nothing."""


_SKIP = msgspec.json.Decoder(_Anything).decode
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19


def _exponent(codes: np.ndarray) -> bool:
    """Whether a digit is followed by `e` or `E` somewhere in `codes` (in a string too)."""
    digit = (codes - 0x30) < 10  # uint8 arithmetic wraps: only '0'..'9' fall below 10
    return bool(np.count_nonzero(digit[:-1] & ((codes[1:] | 0x20) == ord("e"))))


def surely_json(raw: bytes, counts: Counts) -> bool:
    """Whether orjson would parse `raw` into an object, decided without building it; False
    when in doubt (the line is then parsed, and the parser decides and explains).

    msgspec skips every member of an object in C, checking its syntax, escapes and surrogate
    pairs as orjson does, and making no object. What it does not check is checked here: UTF-8
    (in blocks), numbers orjson may refuse as infinite (any exponent or a run of 19 digits is
    doubt), and nesting deeper than orjson parses.
    """
    if counts.depth > MAX_PARSE_DEPTH:
        return False
    for start, end in _blocks(raw):  # each block with the end of the one before
        if _LONG_NUMBER in raw[max(0, start - len(_LONG_NUMBER)):end].translate(_DIGITS_TO_ZERO):
            return False
        if _exponent(np.frombuffer(raw, np.uint8, end - max(0, start - 1), max(0, start - 1))):
            return False
    if not raw.isascii():
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        try:
            for start, end in _blocks(raw):
                decoder.decode(raw[start:end])
            decoder.decode(b"", True)
        except UnicodeDecodeError:
            return False
    try:
        _SKIP(raw)
    except (msgspec.DecodeError, RecursionError):
        return False
    return True
