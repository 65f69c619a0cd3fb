"""Pseudo-hosts: N stand-in machines on this one, for testing a fabric spread over hosts.

Each pseudo-host ``ph<i>`` is

* a network namespace ``tb-ph<i>`` whose ``eth0`` (address ``10.250.0.<i>/24`` by default) is a
  veth into the underlay bridge ``tbu-br`` in the root namespace (the bridge has ``.254``, so this
  machine reaches every pseudo-host, as a head node reaches its workers). The bridge and veths
  carry the underlay MTU (default 9000), which must fit a tunnel's header on top of the emulated
  MTU (``tunnels.check_underlay_mtu``);
* a mount, PID and UTS namespace (``unshare``), in which private file systems hide what a real
  second machine would not share with this one: ``/run/netns`` (the fabric's GPU namespaces:
  ``testbed clean`` on one host removes every ``tb-gpu*`` it sees), ``/run/openvswitch``,
  ``/etc/openvswitch`` and ``/var/log/openvswitch`` (its own ovsdb-server and ovs-vswitchd, started
  by ``ovs-ctl`` as on a real machine), ``/run/zcube-testbed`` (the fabric's state), ``/sys/fs/bpf``
  (a BPF file system of its own: the PFC maps are pinned by fixed names), ``/tmp`` and ``/proc``
  (its own processes only: ``clean`` finds ours by command line). Bind mounts rather than
  ``OVS_RUNDIR``-style variables: the project's code and a user's commands then run inside
  unchanged, with the default paths, as on a real machine, whatever environment an SSH session has;
* its own ``sshd`` (PID 1 of the namespace, listening only on the underlay address, root login
  with a key made for this set of pseudo-hosts, ``known_hosts`` written for them).

Killing a pseudo-host (its PID 1) ends every process on it, as a crash would; its namespaces
then hold nothing but devices, which ``down`` deletes with its network namespace. ``down`` finds
everything by name (``tb-ph*``, ``tbu-*``, the unshare command line), not only from the state
file, so it also cleans up after ``up`` itself was killed.

What a pseudo-host cannot hide: the kernel is shared. ``net.core.wmem_default`` is read-only in a
network namespace, so ``up`` raises it machine-wide (OVS's AF_PACKET send buffer is made with it)
and ``down`` gives the old value back; CPU time, the real-time scheduler and the clocks are the
machine's (clock offsets between pseudo-hosts are exactly 0).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from common.errors import EnvironmentProblem, TestbedError
from common.paths import DEFAULT_STATE_DIR, REPO
from testbed.emulation.hosts import hostsfile

NETNS_PREFIX = "tb-ph"
BRIDGE = "tbu-br"
VETH_PREFIX = "tbu-ph"
ALIAS = "tb-pseudo-host"  # not the fabric's alias: 'testbed clean' must leave pseudo-hosts alone
DEFAULT_SUBNET = "10.250.0.0/24"
DEFAULT_MTU = 9000
MAX_COUNT = 8
SSHD = "/usr/sbin/sshd"
OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
OVS_SNDBUF_BYTES = 16 * 1024 * 1024  # as the one-host fabric asks (build.OVS_SNDBUF_BYTES)
READY_TIMEOUT_S = 60
# what each pseudo-host gets a private copy of (a tmpfs, or a bind mount of its own folder)
PRIVATE_TMPFS = ("/run/netns", "/run/openvswitch", DEFAULT_STATE_DIR, "/tmp")
PRIVATE_DIRS = {"/etc/openvswitch": "etc-openvswitch", "/var/log/openvswitch": "log"}


def base_dir() -> Path:
    return Path(os.environ.get("TESTBED_PSEUDO_DIR", "/run/tb-pseudo"))


def state_path() -> Path:
    return base_dir() / "state.json"


def hosts_path() -> Path:
    return base_dir() / "hosts.yaml"


def _run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and proc.returncode:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise EnvironmentProblem(f"{' '.join(cmd[:4])} failed: {last}")
    return proc


def _save(state: dict) -> None:
    tmp = state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, state_path())


def load_state() -> dict | None:
    try:
        return json.loads(state_path().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def existing_netns() -> list[str]:
    d = "/run/netns"
    return sorted(n for n in (os.listdir(d) if os.path.isdir(d) else []) if n.startswith(NETNS_PREFIX))


# ----------------------------------------------------------------------- up
def up(count: int, mtu: int = DEFAULT_MTU, subnet: str = DEFAULT_SUBNET, pmd_cores: str | None = "0",
       pmd_maxsleep_us: int | None = 500, log=print) -> Path:
    """Make ``count`` pseudo-hosts; return the hosts file written for them. On any failure (or
    Ctrl-C) everything made so far is removed before the error propagates."""
    _check_args(count, mtu, subnet, pmd_cores, pmd_maxsleep_us)
    if os.geteuid() != 0:
        raise EnvironmentProblem("pseudo-hosts need root (namespaces, sshd, Open vSwitch): run with sudo")
    for tool in (SSHD, OVS_CTL, "/usr/bin/ssh-keygen", "/usr/bin/unshare"):
        if not os.path.exists(tool):
            pkg = {"sshd": "openssh-server", "ovs-ctl": "openvswitch-switch"}.get(Path(tool).name, "util-linux")
            raise EnvironmentProblem(f"{tool} is missing: install {pkg} (scripts/setup.sh)")
    if load_state() is not None or existing_netns():
        raise TestbedError("pseudo-hosts are already up (or left behind): run 'testbed hosts pseudo down' first")
    net = ipaddress.ip_network(subnet)
    base = base_dir()
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    state = {"count": count, "mtu": mtu, "subnet": subnet, "bridge": BRIDGE, "hosts": [], "made_dirs": [],
             "wmem_default_was": None, "pmd_cores": pmd_cores, "pmd_maxsleep_us": pmd_maxsleep_us}
    _save(state)  # from here on 'down' finds what exists, even if this process dies
    try:
        _make_up(state, net, count, mtu, log)
    except BaseException:
        log("pseudo-hosts: up failed, removing what was made")
        down()
        raise
    return hosts_path()


def _check_args(count: int, mtu: int, subnet: str, pmd_cores: str | None, maxsleep: int | None) -> None:
    if not 1 <= count <= MAX_COUNT:
        raise TestbedError(f"--count {count}: expected 1 .. {MAX_COUNT} pseudo-hosts")
    if not 1280 <= mtu <= 65535:
        raise TestbedError(f"--mtu {mtu}: expected 1280 .. 65535")
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError:
        raise TestbedError(f"--subnet {subnet!r} is not an IPv4 network such as {DEFAULT_SUBNET}") from None
    if net.version != 4 or net.num_addresses < count + 3:
        raise TestbedError(f"--subnet {subnet}: expected an IPv4 network with room for {count} hosts and a gateway")
    for fabric_net in ("10.1.0.0/16", "10.2.0.0/16"):
        if net.overlaps(ipaddress.ip_network(fabric_net)):
            raise TestbedError(f"--subnet {subnet} overlaps the fabric's addresses ({fabric_net})")
    if pmd_cores is not None and pmd_cores != "":
        cores = [int(c) for c in pmd_cores.split(",") if c.strip().isdigit()]
        if not cores or any(c >= (os.cpu_count() or 1) for c in cores):
            raise TestbedError(f"--pmd-cores {pmd_cores!r}: expected CPU numbers below {os.cpu_count()}")
    if maxsleep is not None and not 0 <= maxsleep <= 10000:
        raise TestbedError(f"--pmd-maxsleep {maxsleep}: expected 0 .. 10000 microseconds (OVS's range)")


def _make_up(state: dict, net, count: int, mtu: int, log) -> None:
    base = base_dir()
    hosts_ip = list(net.hosts())
    gateway = hosts_ip[-1]
    for d in ("/run/sshd", *PRIVATE_TMPFS):  # mount points and sshd's privilege-separation folder
        if not os.path.isdir(d):
            os.makedirs(d, mode=0o755)
            state["made_dirs"].append(d)
    _save(state)
    key = base / "id_ed25519"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "testbed-pseudo-hosts", "-f", str(key)])
    _run(["ip", "link", "add", BRIDGE, "mtu", str(mtu), "type", "bridge", "stp_state", "0", "forward_delay", "0"])
    _run(["ip", "link", "set", BRIDGE, "alias", ALIAS])
    _run(["ip", "addr", "add", f"{gateway}/{net.prefixlen}", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])
    _raise_wmem_default(state)
    _save(state)
    procs = []
    for i in range(1, count + 1):
        name, ns, addr = f"ph{i}", f"{NETNS_PREFIX}{i}", str(hosts_ip[i - 1])
        host = {"name": name, "netns": ns, "address": addr, "dir": str(base / name), "pid": None}
        state["hosts"].append(host)
        _save(state)
        _make_netns(ns, f"{VETH_PREFIX}{i}", addr, net.prefixlen, mtu)
        _write_host_files(base, host, state)
        procs.append(_start(host))
        host["pid"] = procs[-1].pid
        _save(state)
    known = []
    for host, proc in zip(state["hosts"], procs):
        _wait_ready(host, proc)
        pub = (Path(host["dir"]) / "ssh_host_ed25519_key.pub").read_text().split()
        known.append(f"{host['address']} {pub[0]} {pub[1]}\n")
    (base / "known_hosts").write_text("".join(known))
    import sys

    from common.paths import REPO

    # same file system: the project and its interpreter are where they are here
    rows = [{"name": h["name"], "address": h["address"], "user": "root", "key": str(key),
             "known_hosts": str(base / "known_hosts"), "project": str(REPO), "python": sys.executable}
            for h in state["hosts"]]
    hosts_path().write_text(hostsfile.dump(rows))
    log(f"pseudo-hosts: {count} up on {BRIDGE} ({state['subnet']}, MTU {mtu}); hosts file {hosts_path()}")


def _raise_wmem_default(state: dict) -> None:
    """OVS makes its AF_PACKET send socket with net.core.wmem_default, which a network namespace
    cannot set: raise it machine-wide while pseudo-hosts exist."""
    path = Path("/proc/sys/net/core/wmem_default")
    was = int(path.read_text())
    if was < OVS_SNDBUF_BYTES:
        state["wmem_default_was"] = was
        _save(state)
        path.write_text(str(OVS_SNDBUF_BYTES))


def _make_netns(ns: str, veth: str, addr: str, prefixlen: int, mtu: int) -> None:
    _run(["ip", "netns", "add", ns])
    _run(["ip", "link", "add", veth, "mtu", str(mtu), "type", "veth", "peer", "name", "eth0", "mtu", str(mtu),
          "netns", ns])
    _run(["ip", "link", "set", veth, "alias", ALIAS, "master", BRIDGE, "up"])
    batch = (f"link set lo up\nlink set eth0 up\naddr add {addr}/{prefixlen} dev eth0\n")
    _run(["ip", "-n", ns, "-batch", "-"], input=batch)
    for knob in ("all", "default", "eth0"):  # no IPv6 chatter on the underlay
        _run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{knob}.disable_ipv6=1"], check=False)


SSHD_CONFIG = """\
# sshd of pseudo-host {name} (testbed hosts pseudo): root with the pseudo-hosts' key, on the underlay only
ListenAddress {address}:22
HostKey {dir}/ssh_host_ed25519_key
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
MaxStartups 64:30:128
MaxSessions 64
Subsystem sftp internal-sftp
SetEnv TESTBED_PSEUDO_HOST={name}
"""

INIT = """\
#!/bin/sh
# PID 1 of pseudo-host {name}: private mounts, its own Open vSwitch, then sshd.
set -e
cd /
hostname {name}
{keep_before}for d in {tmpfs}; do mount -t tmpfs -o mode=0755 tb-{name} "$d"; done
chmod 1777 /tmp
{keep_after}mount --bind {dir}/etc-openvswitch /etc/openvswitch
mount --bind {dir}/log /var/log/openvswitch
mount -t bpf bpf /sys/fs/bpf
{ovs_ctl} start --system-id=random --no-mlockall
ovs-vsctl --timeout=10 set open_vswitch . {pmd_settings}
touch {dir}/ready
exec {sshd} -D -e -f {dir}/sshd_config
"""


def keep_checkout_lines(checkout: Path, host_dir: Path) -> tuple[str, str]:
    """Shell lines that keep this checkout visible in a pseudo-host when it lies under a folder the
    pseudo-host makes private (a clone in /tmp, as a CI runner may make): bound aside before the
    tmpfs hides it, bound back after. Empty when the checkout is not under one."""
    if not any(checkout == Path(p) or Path(p) in checkout.parents for p in PRIVATE_TMPFS):
        return "", ""
    aside = host_dir / "checkout"
    return (f"mkdir -p {aside} && mount --bind {checkout} {aside}\n",
            f"mkdir -p {checkout} && mount --bind {aside} {checkout}\n")


def _write_host_files(base: Path, host: dict, state: dict) -> None:
    d = Path(host["dir"])
    for sub in ("", "etc-openvswitch", "log"):
        (d / sub).mkdir(mode=0o700, exist_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{host['name']}-host", "-f",
          str(d / "ssh_host_ed25519_key")])
    shutil.copy(base / "id_ed25519.pub", d / "authorized_keys")
    (d / "sshd_config").write_text(SSHD_CONFIG.format(**host))
    pmd = []
    if state.get("pmd_cores"):
        mask = sum(1 << int(c) for c in state["pmd_cores"].split(","))
        pmd.append(f"other_config:pmd-cpu-mask={mask:#x}")
    if state.get("pmd_maxsleep_us") is not None:
        pmd.append(f"other_config:pmd-maxsleep={state['pmd_maxsleep_us']}")
    before, after = keep_checkout_lines(REPO, d)
    init = INIT.format(name=host["name"], dir=d, tmpfs=" ".join(PRIVATE_TMPFS), ovs_ctl=OVS_CTL, sshd=SSHD,
                       keep_before=before, keep_after=after,
                       pmd_settings=" ".join(pmd) or "external_ids:testbed-pseudo=1")
    (d / "init.sh").write_text(init)


def _start(host: dict) -> subprocess.Popen:
    """PID 1 of the pseudo-host: unshare's child, killed with it (--kill-child)."""
    d = Path(host["dir"])
    out = open(d / "init.log", "ab")
    try:
        return subprocess.Popen(
            ["ip", "netns", "exec", host["netns"], "unshare", "--mount", "--pid", "--uts", "--fork", "--mount-proc",
             "--propagation", "private", "--kill-child=SIGKILL", "/bin/sh", str(d / "init.sh")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        out.close()


def _wait_ready(host: dict, proc: subprocess.Popen) -> None:
    """Until its sshd accepts connections on the underlay address (its OVS is up before that)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    d = Path(host["dir"])
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (d / "init.log").read_text(errors="replace").strip().splitlines()[-2:]
            raise EnvironmentProblem(f"pseudo-host {host['name']} did not start: {' | '.join(tail)}")
        if (d / "ready").exists():
            try:
                with socket.create_connection((host["address"], 22), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
        time.sleep(0.1)
    raise EnvironmentProblem(f"pseudo-host {host['name']}: sshd not answering on {host['address']}:22 "
                             f"after {READY_TIMEOUT_S} s (see {d / 'init.log'})")


# --------------------------------------------------------------------- down
def _unshare_pids() -> list[int]:
    """Our pseudo-hosts' unshare processes (and their PID 1s), found by command line."""
    out = []
    base = str(base_dir()).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"/init.sh") and a.startswith(base) for a in cmd):
            out.append(int(entry))
    return out


def _pids_in_netns(names: list[str]) -> list[int]:
    inodes = set()
    for n in names:
        try:
            inodes.add(os.stat(f"/run/netns/{n}").st_ino)
        except OSError:
            pass
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def kill(name: str) -> None:
    """Crash one pseudo-host: SIGKILL its PID 1 (every process on it dies; its devices stay until
    ``down``). For the host-lost-mid-run tests."""
    st = load_state() or {}
    host = next((h for h in st.get("hosts", []) if h["name"] == name), None)
    if host is None:
        raise TestbedError(f"no pseudo-host {name!r}: expected one of "
                           f"{', '.join(h['name'] for h in st.get('hosts', [])) or '(none up)'}")
    for pid in _pids_in_netns([host["netns"]]):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def down() -> list[str]:
    """Remove every pseudo-host and the underlay, and give machine-wide settings back; also after
    ``up`` or a pseudo-host was killed. Returns what was removed."""
    if os.geteuid() != 0:
        raise EnvironmentProblem("pseudo-hosts need root: run with sudo")
    st = load_state() or {}
    removed = []
    spaces = existing_netns()
    victims = set(_unshare_pids()) | set(_pids_in_netns(spaces))
    for pid in sorted(victims):
        try:
            os.kill(pid, signal.SIGKILL)
            removed.append(f"process {pid}")
        except OSError:
            pass
    _wait_gone(victims)
    if spaces:
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns delete {n}\n" for n in spaces),
                       text=True, capture_output=True)
        removed += [f"netns {n}" for n in spaces]
    removed += _remove_links()
    # run files a fabric over hosts left in a pseudo-host's node folder (its /run is this machine's)
    for h in st.get("hosts", []):
        node = Path("/run/testbed-hosts") / h["name"]
        if node.is_dir() and not node.is_symlink():
            shutil.rmtree(node, ignore_errors=True)
            removed.append(f"folder {node}")
    with contextlib.suppress(OSError):
        os.rmdir("/run/testbed-hosts")
    was = st.get("wmem_default_was")
    if was is not None:
        Path("/proc/sys/net/core/wmem_default").write_text(str(was))
        removed.append(f"net.core.wmem_default back to {was}")
    for d in reversed(st.get("made_dirs", [])):
        try:
            os.rmdir(d)
        except OSError:
            pass
    if base_dir().exists():
        shutil.rmtree(base_dir(), ignore_errors=True)
        removed.append(f"folder {base_dir()}")
    return removed


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (it may vanish while we look)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: set[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_running(p) for p in pids):
            return
        time.sleep(0.05)


def _remove_links() -> list[str]:
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    removed = []
    for line in out.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if f"alias {ALIAS}" in line or name == BRIDGE or name.startswith(VETH_PREFIX):
            if _run(["ip", "link", "del", name], check=False).returncode == 0:
                removed.append(f"link {name}")
    return removed


def leftovers() -> list[str]:
    """What of the pseudo-hosts exists now (empty after ``down``)."""
    found = [f"netns {n}" for n in existing_netns()]
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    found += [f"link {line.split(':')[1].strip().split('@')[0]}" for line in out.splitlines()
              if f"alias {ALIAS}" in line or line.split(":")[1].strip().split("@")[0] == BRIDGE]
    found += [f"process {p}" for p in _unshare_pids()]
    if base_dir().exists():
        found.append(f"folder {base_dir()}")
    return found
