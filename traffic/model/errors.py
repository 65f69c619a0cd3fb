"""Errors raised by the traffic package.

All are ``TestbedError`` subclasses so the CLI prints them as one line and
exits 2; the subclasses only let callers and tests tell the source apart.
"""

from common.errors import TestbedError


class TrafficError(TestbedError):
    """Bad input to the traffic generator (arguments, models, placement)."""


class TraceError(TrafficError):
    """A trace file that cannot be read; the message names file and line."""


__all__ = ["TrafficError", "TraceError"]
