"""Reading an experiment file: YAML (or JSON, or a run's own experiment.json) into its raw mapping, a key given
twice refused (PyYAML would silently keep the last), every problem one line naming the file."""

from __future__ import annotations

from pathlib import Path

import yaml

from common.errors import TestbedError


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that rejects a key given twice (PyYAML silently keeps the last)."""


def _mapping(loader: _UniqueKeyLoader, node, deep: bool = False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read_file(path: Path) -> dict:
    """The raw mapping of an experiment file (YAML or JSON). A run's own
    ``experiment.json`` is accepted too: its ``experiment`` part is rerun."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise TestbedError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TestbedError(f"{path}: {where}not valid YAML: {what}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise TestbedError(f"{path}: must hold a mapping of keys (name, fabrics, link, trace, serving, ...), "
                           f"got a {type(doc).__name__}")
    if path.suffix == ".json" and isinstance(doc.get("experiment"), dict) and "overrides" in doc:
        exp = doc["experiment"]
        trace = exp.get("trace")
        if isinstance(trace, dict) and trace.get("workload") is not None:  # its path is the workload's file,
            exp = exp | {"trace": trace | {"path": None}}  # resolved when it ran: the workload names it again
        return exp
    return doc
