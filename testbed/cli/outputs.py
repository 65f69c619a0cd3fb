"""Where verbs write: checked before anything is built, and OSErrors as one line.

A verb that writes files checks the place first (``require_dir`` for a folder
it writes into, ``require_new_dir`` for a folder it creates, ``require_file``
for one file), so a bad ``--out``, ``--logs`` or ``--graph`` fails in one line
before a fabric, a run directory or a picture exists. What can still fail
later (a full disk, a device that refuses writes) is an ``OSError``: the CLI
turns it into one line with ``os_error_line``, naming the path.

As root, ``--logs`` (where the benchmarks write their logs and figures) must also be a
directory only root can write to, below directories no other user can write to
(``common.owned.unsafe_dir``): otherwise another user could put a link where root is about
to write. Refused in one line naming the path and the rule.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from common import owned
from common.errors import TestbedError
from common.paths import REPORTS

PRIVATE_FLAGS = ("--logs",)  # as root: a directory only root can write to (owned.unsafe_dir)

_DIR_RULE = "expected an existing, writable directory"


def _why_missing(path: Path, exc: OSError, folder_of: bool = False) -> str:
    """Why ``path`` (with ``folder_of``: the folder of the path the user gave) cannot be reached:
    which ancestor is not a directory, or that it does not exist."""
    if exc.errno == errno.ENOTDIR:
        for parent in reversed(path.parents):
            if parent.exists() and not parent.is_dir():
                return f"{parent} is a file, not a directory"
        return "a parent is not a directory"
    what = f"its folder {path} " if folder_of else ""
    if exc.errno == errno.ENOENT:
        return f"{what}does not exist"
    return f"{what}cannot be reached ({exc.strerror or exc})" if folder_of else (exc.strerror or str(exc))


def _probe(folder: Path, flag: str, given: Path | None = None) -> None:
    """Create and remove a file in ``folder`` (root passes permission bits, not read-only or virtual file
    systems). ``given``: the path the user named, when ``folder`` is its parent."""
    try:
        fd, name = tempfile.mkstemp(prefix=".testbed-write-check-", dir=folder)
    except OSError as exc:
        if given is None:
            raise TestbedError(f"{flag} {folder}: cannot create files there ({exc.strerror or exc}); "
                               f"{_DIR_RULE}") from None
        raise TestbedError(f"{flag} {given}: cannot create files in {folder} ({exc.strerror or exc}); "
                           "expected a writable folder") from None
    os.close(fd)
    os.unlink(name)


def require_dir(path: str | Path, flag: str = "--out") -> Path:
    """An existing directory this process can create files in (``--out``: run directories go inside it)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise TestbedError(f"{flag} {path}: {_why_missing(path, exc)}; {_DIR_RULE}") from None
    if not stat.S_ISDIR(mode):
        raise TestbedError(f"{flag} {path}: is a file, not a directory; {_DIR_RULE}")
    _require_private(path, flag)
    _probe(path, flag)
    return path


def _require_private(path: Path, flag: str) -> None:
    """As root, a ``PRIVATE_FLAGS`` directory (or, not made yet, the directory it will be made in) only root
    can write to; one line naming the path and the rule otherwise."""
    if flag not in PRIVATE_FLAGS or os.geteuid() != 0:
        return
    reason = owned.unsafe_dir(path)
    if reason is not None:
        raise TestbedError(f"{flag} {path}: refused, {reason}; {owned.PRIVATE_DIR_RULE}")


def out_root(value: str | Path) -> Path:
    """``--out`` of replay, run and sweep: an existing, writable directory (the default reports/ is made if
    missing: it is the project's own)."""
    if Path(value) == REPORTS:
        REPORTS.mkdir(exist_ok=True)
    return require_dir(value, "--out")


def require_new_dir(path: str | Path, flag: str = "--logs") -> Path:
    """A directory that will be created if missing (``--logs``): it, or else its parent, must be usable."""
    path = Path(path)
    if os.path.lexists(path) or path.parent == path:
        return require_dir(path, flag)
    _require_folder(path, flag, "a directory")
    _require_private(path, flag)
    _probe(path.parent, flag, path)
    return path


def _require_folder(path: Path, flag: str, what: str) -> None:
    """``path``'s folder exists and is a directory, else one line naming it."""
    parent = path.parent
    try:
        mode = os.stat(parent).st_mode
    except OSError as exc:
        raise TestbedError(f"{flag} {path}: {_why_missing(parent, exc, folder_of=True)}; "
                           f"expected {what} in an existing, writable folder") from None
    if not stat.S_ISDIR(mode):
        raise TestbedError(f"{flag} {path}: {parent} is a file, not a directory; "
                           f"expected {what} in an existing, writable folder")


def require_file(path: str | Path, flag: str = "--graph") -> Path:
    """A file to be (over)written: not a directory, and its folder exists and takes new files."""
    path = Path(path)
    if path.is_dir():
        raise TestbedError(f"{flag} {path}: is a directory; expected a file name, e.g. {path / 'out.png'}")
    _require_folder(path, flag, "a file")
    if not path.exists():
        _probe(path.parent, flag, path)
    return path


def _problem(exc: OSError) -> str:
    """The OS's words for it ('No space left on device'), one line."""
    return " ".join((exc.strerror or str(exc) or type(exc).__name__).split())


def os_error_line(exc: OSError, where: str | None = None) -> str:
    """One line for an OSError: the path(s) it names, else ``where`` (e.g. '--out reports'), and the problem."""
    if exc.filename is not None:
        names = f"{os.fsdecode(exc.filename)}"
        if exc.filename2 is not None:
            names += f" -> {os.fsdecode(exc.filename2)}"
        return " ".join(f"{names}: {_problem(exc)}".split("\n"))
    if where:
        return f"writing under {where}: {_problem(exc)}"
    return _problem(exc)


@contextmanager
def writing(path: str | Path, flag: str) -> Iterator[None]:
    """Turn an OSError while writing ``path`` (a full disk, a device that refuses it) into one TestbedError."""
    try:
        yield
    except OSError as exc:
        raise TestbedError(f"{flag} {path}: {_problem(exc)}") from None


__all__ = ["out_root", "require_dir", "require_new_dir", "require_file", "os_error_line", "writing"]
