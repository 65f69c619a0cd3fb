"""What is provably ours, checked at the moment root acts on it, never taken from a file's word.

The testbed runs as root: it signals processes, deletes devices and writes files. Each of those
acts only on what it can check itself:

* a process: its pid together with its start time (``/proc/PID/stat`` field 22, clock ticks after
  boot: a reused pid has another), its exact command line, its uid and its working directory (the
  checkout that started it). It is signalled through a pidfd opened *before* those checks, so the
  pid cannot be given to another process between the check and the signal (``stop``);
* a directory root writes into: owned by root and writable by no one else, nor is any directory
  on the way to it unless sticky, as /tmp is (``unsafe_dir``);
* a file root writes there: opened without following a symbolic link, a new one created
  exclusively (``open_private``, ``write_private``);
* a lifeline (``lifeline``): a pipe whose write end only the process that starts a fabric holds.
  Its children (the controller, the pause daemon) watch the read end: the writer's death, a
  ``kill -9`` included, closes it and they stop; ``release`` writes one byte first, and a child
  that sees a byte outlives the writer (``testbed up`` leaves its fabric running on purpose).

The bottom layer: imports nothing from the project but ``common.errors``.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from select import POLLHUP, POLLIN, poll  # bound now: eventlet's monkey patching deletes select.poll

from common.errors import EnvironmentProblem

# ------------------------------------------------------------------ processes


@dataclass(frozen=True)
class ProcInfo:
    """One process as /proc shows it now."""

    pid: int
    start: int  # /proc/PID/stat field 22: start time in clock ticks after boot
    argv: tuple[str, ...]
    uid: int  # real
    euid: int
    cwd: str | None  # None: not readable (a kernel thread, or gone)
    zombie: bool


def proc_info(pid: int) -> ProcInfo | None:
    """The process ``pid`` now (None: there is none)."""
    try:
        stat_text = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, ValueError):
        return None
    # the command name (field 2) is in parentheses and may hold spaces or ')': split after the last one
    fields = stat_text.rsplit(")", 1)[1].split()
    uids = next((line.split()[1:3] for line in status.splitlines() if line.startswith("Uid:")), ["-1", "-1"])
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = None
    argv = tuple(os.fsdecode(a) for a in raw.split(b"\0")[:-1]) if raw else ()
    return ProcInfo(pid=pid, start=int(fields[19]), argv=argv, uid=int(uids[0]), euid=int(uids[1]), cwd=cwd,
                    zombie=fields[0] in ("Z", "X"))


def start_time(pid: int) -> int | None:
    """``pid``'s start time in clock ticks after boot (None: no such process)."""
    info = proc_info(pid)
    return info.start if info is not None else None


def same_user(info: ProcInfo) -> bool:
    """Whether the process runs as this process's user, real and effective (root: uid 0)."""
    return info.uid == info.euid == os.geteuid()


def _wait_exit(pidfd: int, timeout_s: float) -> bool:
    """Until the process behind ``pidfd`` exits (its pidfd turns readable); False after ``timeout_s``."""
    poller = poll()
    poller.register(pidfd, POLLIN)
    return bool(poller.poll(max(0, int(timeout_s * 1000))))


def stop(pid: int | None, start: int | None, ours: Callable[[ProcInfo], bool], term_s: float = 2.5) -> str:
    """SIGTERM (the process cleans up: the pause daemon resumes its queues), SIGKILL after ``term_s``, to
    ``pid`` only if it is the process that started at ``start`` (None: a state file of an earlier version
    recorded no start; ``ours`` decides alone) and ``ours`` says it is ours.

    Returns "stopped", "gone" (no such process, or a zombie) or "not ours" (left alone)."""
    if not pid or pid <= 0:
        return "gone"
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return "gone"
    except OSError:  # a thread's id, not a process's
        return "not ours"
    try:
        info = proc_info(pid)  # the pidfd holds the process the pid named when it was opened: if that
        # process exited since and the pid was reused, the start time below is the new one's and differs
        if info is None or info.zombie:
            return "gone"
        if (start is not None and info.start != start) or not ours(info):
            return "not ours"
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            if not _wait_exit(pidfd, term_s):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                _wait_exit(pidfd, 5.0)
        except ProcessLookupError:
            pass
        return "stopped"
    finally:
        os.close(pidfd)
        try:  # our own child: reap it (another's: not ours to reap)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


# ----------------------------------------------------------------- directories
PRIVATE_DIR_RULE = ("as root, expected a directory owned by root that no other user can write to, below "
                    "directories no other user can write to (sticky ones like /tmp excepted)")


def unsafe_dir(path: str | Path) -> str | None:
    """Why root must not write into ``path`` (None: it may). Each existing directory from / down to
    ``path`` must be owned by root (or by this process's user: as root that is root) and not writable
    by group or others, except a sticky ancestor (/tmp); symbolic links on the way are followed only
    when owned so. A part that does not exist yet is fine: root will create it inside a checked
    directory."""
    parts = list(Path(os.path.abspath(path)).parts[1:])
    here = Path("/")
    hops = 0
    reason = _unsafe(here, os.lstat(here), last=not parts)
    while parts and reason is None:
        name = parts.pop(0)
        nxt = here.parent if name == ".." else here / name
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{nxt} cannot be checked ({exc.strerror or exc})"
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if st.st_uid not in (0, os.geteuid()):
                return f"{nxt} is a symbolic link owned by uid {st.st_uid}"
            if hops > 40:
                return f"{nxt}: too many symbolic links"
            target = Path(os.readlink(nxt))
            if target.is_absolute():
                here = Path("/")
            parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
            continue
        reason = _unsafe(nxt, st, last=not parts)
        here = nxt
    return reason


def _unsafe(path: Path, st: os.stat_result, last: bool) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid not in (0, os.geteuid()):
        return f"{path} is owned by uid {st.st_uid}"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and (last or not st.st_mode & stat.S_ISVTX):
        who = "group and others" if writable == stat.S_IWGRP | stat.S_IWOTH else \
            "its group" if writable == stat.S_IWGRP else "others"
        return f"{path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def require_private_dir(path: str | Path, what: str) -> Path:
    """As root: ``path`` made if missing (mode 755) and checked with ``unsafe_dir``, else one line naming the
    path and the rule. Not root: nothing to check (the OS's permissions protect the caller)."""
    path = Path(path)
    if os.geteuid() != 0:
        return path
    reason = unsafe_dir(path)
    if reason is None and not path.is_dir():
        for missing in reversed([p for p in (path, *path.parents) if not os.path.lexists(p)]):
            try:
                os.mkdir(missing, 0o755)
                os.chmod(missing, 0o755)  # whatever root's umask
            except FileExistsError:
                pass
            except OSError as exc:
                raise EnvironmentProblem(f"{what} {path}: cannot create {missing} ({exc.strerror or exc})") from None
        reason = unsafe_dir(path)
    if reason is not None:
        raise EnvironmentProblem(f"{what} {path}: refused, {reason}; {PRIVATE_DIR_RULE}")
    return path


# ----------------------------------------------------------------------- files
def open_private(path: str | Path, mode: str = "a", perm: int = 0o644):
    """Open ``path`` to write ("w": a new file, an existing one replaced by unlinking it first; "a": append,
    created if missing) without following a symbolic link, and only if it is a regular file of ours with
    one name (no hard link into another place). Binary with "wb"/"ab"."""
    base = mode.replace("b", "")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    if base == "w":
        Path(path).unlink(missing_ok=True)  # unlink removes a link itself, never its target
        flags |= os.O_EXCL
    elif base == "a":
        flags |= os.O_APPEND
    else:
        raise ValueError(f"mode {mode!r}: expected w, a, wb or ab")
    try:
        fd = os.open(path, flags, perm)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise EnvironmentProblem(f"{path}: is a symbolic link; refused to write through it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.geteuid():
        os.close(fd)
        raise EnvironmentProblem(f"{path}: not a regular file of this user with one name (uid {st.st_uid}, "
                                 f"{st.st_nlink} links); refused to write to it")
    return os.fdopen(fd, mode)


def write_private(path: str | Path, text: str) -> None:
    """Replace ``path`` atomically: a new temporary file beside it (created exclusively, no link followed),
    renamed over it, so a reader never sees half of it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open_private(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


# -------------------------------------------------------------------- lifeline
LIFELINE_HELD, LIFELINE_RELEASED, LIFELINE_CUT = "held", "released", "cut"


def lifeline() -> tuple[int, int]:
    """A new lifeline: (read end for the children, write end for this process); neither is inherited
    unless passed on (``pass_fds``)."""
    return os.pipe()


def release(write_fd: int) -> None:
    """Let the children outlive this process: one byte they see, then the write end closed."""
    try:
        os.write(write_fd, b"r")
    finally:
        os.close(write_fd)


def lifeline_state(read_fd: int, timeout_s: float = 0.0) -> str:
    """"held" (the starter runs), "released" (it let go: live on) or "cut" (it died without letting go);
    waits up to ``timeout_s`` (None: until it is not held). Nothing is read: every child sees the byte."""
    poller = poll()
    poller.register(read_fd, POLLIN | POLLHUP)
    events = poller.poll(None if timeout_s is None else int(timeout_s * 1000))
    if not events:
        return LIFELINE_HELD
    mask = events[0][1]
    if mask & POLLIN:
        return LIFELINE_RELEASED
    return LIFELINE_CUT


__all__ = ["ProcInfo", "proc_info", "start_time", "same_user", "stop", "unsafe_dir", "require_private_dir",
           "PRIVATE_DIR_RULE", "open_private", "write_private", "lifeline", "release", "lifeline_state"]
