"""A repetition's settings for a test, by the one settings path: an experiment document, checked as a file
would be, converted as a run converts it (``testbed.experiment.schema.repetition_spec``)."""

from __future__ import annotations

from testbed.experiment.schema import repetition_spec, validate
from testbed.repetition.spec import RepetitionSpec


def repetition(doc: dict | None = None, rep: int = 1, kind: str | None = None) -> RepetitionSpec:
    """Repetition ``rep`` of the experiment ``doc`` on fabric ``kind`` (default: its first), the schema's
    defaults where it says nothing."""
    exp = validate(doc or {}, "test")
    return repetition_spec(exp, kind or exp.fabrics[0], rep)
