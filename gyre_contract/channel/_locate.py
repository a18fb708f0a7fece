"""Which backend a channel URI names: `ray://NAMESPACE/NAME`, else `file://DIR` or a plain path."""

from __future__ import annotations

import os

from gyre_contract.channel._backends import Backend
from gyre_contract.channel._handshake import NotAChannelError


def open_backend(uri: str | os.PathLike[str]) -> Backend:
    """The backend a URI names: `ray://NAMESPACE/NAME`, else `file://DIR` or a plain path."""
    text = os.fspath(uri)
    if text.startswith("ray://"):
        from gyre_contract.channel._raybackend import RayBackend

        return RayBackend(text)
    if "://" in text and not text.startswith("file://"):
        scheme = text.split("://", 1)[0]
        raise NotAChannelError(f"unknown channel URI scheme {scheme!r} in {text}; known: "
                               "file:// (or a plain path), ray://NAMESPACE/NAME")
    from gyre_contract.channel._filebackend import FileBackend

    return FileBackend(text.removeprefix("file://"))
