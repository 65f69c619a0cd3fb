"""A repetition's settings for a test, by the one settings path: an experiment document, checked as a file
would be, mapped onto a repetition."""

from __future__ import annotations

from testbed.experiment.schema import repetition_config, validate
from testbed.repetition.config import RepetitionConfig


def repetition(doc: dict | None = None, rep: int = 1, kind: str | None = None) -> RepetitionConfig:
    """Repetition ``rep`` of the experiment ``doc`` (the schema's defaults where it says nothing)."""
    return repetition_config(validate(doc or {}, "test"), rep, kind)
