"""Start every GPU's traffic agent from one pre-imported process, and hand them t0.

An agent started as ``ip netns exec NS python -m traffic.runtime.agent`` pays for a
new interpreter and its imports (~165 ms of CPU each here), and one of the two
cores belongs to OVS's PMD: 32 agents took ~5 s. The launcher imports the
agent once, then per agent forks, enters the GPU's network namespace with
setns(2) and runs the agent's ``main``: a fork costs milliseconds.

The launcher is its own process (``python -m traffic.runtime.launcher --specs FILE``,
in the root namespace) because forking needs a parent with no threads and no
event loop; the replay has both. It talks over its stdin and stdout, one line
each:

* in: ``t0 <CLOCK_MONOTONIC s>`` hands every agent the common start time
  (each agent reads it from its own pipe, see ``traffic.runtime.agent --t0-stdin``);
  ``stop`` (or EOF, or SIGTERM) stops them: SIGTERM, then SIGKILL after
  ``--stop-timeout`` seconds.
* out: JSON lines ``{"event": "started", "name", "pid"}``,
  ``{"event": "exit", "name", "rc", "cpu_s"}`` (rc < 0: killed by that
  signal; cpu_s: the agent's user + system CPU seconds) and finally
  ``{"event": "done"}``.

Children die with the launcher (PR_SET_PDEATHSIG) and the launcher with its
parent, so a SIGKILLed replay leaves no agent behind.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from traffic.runtime import netns

PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 10.0
AGENT_PORT = 7000  # every agent listens on both NIC ports' addresses at this port
AGENT_NICE = -10  # agents wake on time although OVS and the TCP stacks keep both cores busy
START_MARGIN_S = 0.5  # from handing out t0 (or the coordinator starting its clock) to run time 0


@dataclass(frozen=True)
class AgentSpec:
    """One agent: its name, namespace (None: the launcher's own), agent arguments, stderr file, nice."""

    name: str
    netns: str | None
    argv: list[str]
    stderr: str
    nice: int = 0


def _libc():
    return ctypes.CDLL("libc.so.6", use_errno=True)


def _die_with_parent(libc, sig: int) -> None:
    if libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def die_with_parent(sig: int) -> None:
    """Ask the kernel to send this process ``sig`` when its parent exits (for a Popen preexec_fn)."""
    _die_with_parent(_libc(), sig)


def _child(spec: AgentSpec, t0_read: int, other_fds: list[int], launcher_pid: int) -> int:
    """In the forked child: become the agent (stdin = the t0 pipe, stderr = its file)."""
    from traffic.runtime import agent

    for fd in other_fds:
        os.close(fd)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    libc = _libc()
    _die_with_parent(libc, signal.SIGTERM)
    if os.getppid() != launcher_pid:
        return 1
    os.dup2(t0_read, 0)
    os.close(t0_read)
    err = os.open(spec.stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 2)
    os.close(err)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    sys.stdin = open(0, closefd=False)
    if spec.netns:
        netns.enter(spec.netns)
    if spec.nice:
        os.setpriority(os.PRIO_PROCESS, 0, spec.nice)
    return agent.main(spec.argv)


class Launcher:
    """The launcher process's state: one child and one t0 pipe per agent."""

    def __init__(self, specs: list[AgentSpec], out) -> None:
        self.specs = specs
        self.out = out
        self.pids: dict[int, str] = {}
        self.pipes: dict[str, int] = {}
        self.exits: dict[str, int] = {}

    def emit(self, **event) -> None:
        self.out.write(json.dumps(event) + "\n")
        self.out.flush()

    def fork_all(self) -> None:
        me = os.getpid()
        for spec in self.specs:
            r, w = os.pipe()
            self.out.flush()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _child(spec, r, [w, *self.pipes.values()], me)
                except BaseException:  # noqa: BLE001 - a child must never return into the launcher
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            os.close(r)
            self.pids[pid] = spec.name
            self.pipes[spec.name] = w
            self.emit(event="started", name=spec.name, pid=pid)

    def reap(self, block: bool = False) -> None:
        while self.pids:
            try:
                pid, status, usage = os.wait4(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            name = self.pids.pop(pid, None)
            if name is not None:
                self.exits[name] = os.waitstatus_to_exitcode(status)
                self.emit(event="exit", name=name, rc=self.exits[name],
                          cpu_s=round(usage.ru_utime + usage.ru_stime, 3))
            if block:
                return

    def hand_out(self, t0: str) -> None:
        line = f"{t0}\n".encode()
        for name, w in list(self.pipes.items()):
            try:
                os.write(w, line)
            except OSError:
                pass  # that agent already exited; its exit event says so
            os.close(w)
            del self.pipes[name]

    def stop(self, timeout_s: float) -> None:
        for w in self.pipes.values():
            os.close(w)  # an agent still waiting for t0 sees EOF and stops
        self.pipes.clear()
        for pid in list(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while self.pids and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.02)
        for pid in list(self.pids):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while self.pids:
            self.reap(block=True)
        self.emit(event="done")


def serve(specs: list[AgentSpec], stop_timeout_s: float, inp=None, out=None) -> int:
    """The launcher's main loop: fork the agents, then follow the commands on stdin."""
    inp = inp if inp is not None else sys.stdin
    launcher = Launcher(specs, out if out is not None else sys.stdout)
    stopping = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the agents and the replay; the replay says stop
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    launcher.fork_all()
    fd = inp.fileno()
    buf = b""
    while not stopping.is_set():
        launcher.reap()
        try:
            ready, _, _ = select.select([fd], [], [], 0.1)
        except InterruptedError:
            continue
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            words = line.decode().split()
            if words[:1] == ["t0"] and len(words) == 2:
                launcher.hand_out(words[1])
            elif words == ["stop"]:
                stopping.set()
    launcher.stop(stop_timeout_s)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="traffic.runtime.launcher", description="Fork traffic agents into GPU namespaces.")
    p.add_argument("--specs", required=True, help="JSON list of agent specs (name, netns, argv, stderr, nice)")
    p.add_argument("--parent", type=int, help="exit when this process (the replay) dies")
    p.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT_S)
    args = p.parse_args(argv)
    if args.parent:
        _die_with_parent(_libc(), signal.SIGTERM)
        if os.getppid() != args.parent:
            return 1
    import traffic.runtime.agent  # noqa: F401 - imported once here, inherited by every fork

    try:
        specs = [AgentSpec(**d) for d in json.loads(Path(args.specs).read_text())]
    except (OSError, ValueError, TypeError) as exc:
        print(f"traffic.runtime.launcher: error: cannot read --specs {args.specs}: {exc}", file=sys.stderr)
        return 2
    return serve(specs, args.stop_timeout)


class Fleet:
    """The replay's handle on a launcher: start, hand out t0, watch exits, stop."""

    def __init__(self, specs: list[AgentSpec], specs_path: Path, cwd: Path, env: dict | None = None) -> None:
        specs_path.write_text(json.dumps([asdict(s) for s in specs]))
        self.names = [s.name for s in specs]
        self.pids: dict[str, int] = {}
        self.exits: dict[str, int] = {}
        self.cpu_s: dict[str, float] = {}
        self.done = threading.Event()
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-m", "traffic.runtime.launcher", "--specs", str(specs_path),
                                      "--parent", str(os.getpid())], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, name="launcher-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                if ev.get("event") == "started":
                    self.pids[ev["name"]] = ev["pid"]
                elif ev.get("event") == "exit":
                    self.exits[ev["name"]] = ev["rc"]
                    self.cpu_s[ev["name"]] = ev.get("cpu_s", 0.0)
            if ev.get("event") == "done":
                self.done.set()
        self.done.set()

    def exited(self) -> dict[str, int]:
        """Agents that have exited so far, with their exit codes."""
        with self._lock:
            return dict(self.exits)

    def launcher_alive(self) -> bool:
        return self.proc.poll() is None

    def _send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def go(self, t0: float) -> None:
        """Every agent starts its plan's clock at ``t0`` (CLOCK_MONOTONIC s)."""
        self._send(f"t0 {t0:.6f}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int]:
        """Stop every agent (SIGTERM, SIGKILL after ``timeout_s``); all exit codes."""
        self._send("stop")
        if not self.done.wait(timeout_s + 10):
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        return self.exited()


if __name__ == "__main__":
    sys.exit(main())
