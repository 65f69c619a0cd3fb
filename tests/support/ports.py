"""A TCP port nothing listens on right now, as the OS hands it out (never a number made up from the pid)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS gives as free at ``host`` (``0.0.0.0``: free on every address, so each agent may listen on it at
    its own 127/8 address). Free when asked: a test binds it soon after."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
