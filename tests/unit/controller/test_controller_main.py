"""controller.__main__: the controller serves only the listening socket it was handed and never binds one of
its own; a wrong fd is one line (issue 28). The real process is started in tests/unit/emulation/test_stop_process."""

from __future__ import annotations

import os
import socket

import pytest

from controller import __main__ as ctl


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock
    sock.close()


def test_the_inherited_socket_is_taken_as_it_is(listener):
    port = listener.getsockname()[1]
    fd = os.dup(listener.fileno())  # as the controller inherits it: its own fd of the same socket
    with ctl.inherited_listener(fd, port) as sock:
        assert sock.getsockname() == ("127.0.0.1", port) and sock.fileno() == fd


def test_a_socket_on_another_port_or_not_listening_is_refused(listener):
    port = listener.getsockname()[1]
    with pytest.raises(SystemExit, match=rf"is not a TCP socket listening on 127.0.0.1:{port + 1} "
                                         rf"\(it is \('127.0.0.1', {port}\), listening\)"):
        ctl.inherited_listener(os.dup(listener.fileno()), port + 1)
    with socket.socket() as idle:
        idle.bind(("127.0.0.1", 0))
        with pytest.raises(SystemExit, match="not listening"):
            ctl.inherited_listener(os.dup(idle.fileno()), idle.getsockname()[1])
    with pytest.raises(SystemExit, match=r"--listen-fd 999 is not an open socket \(Bad file descriptor\)"):
        ctl.inherited_listener(999, port)


def test_os_ken_gets_the_handed_socket_once_and_nothing_else(listener):
    port = listener.getsockname()[1]
    listen = ctl.handoff(listener, port)
    with pytest.raises(RuntimeError, match=r"os-ken asked to listen on \('0.0.0.0', 6633\)"):
        listen(("0.0.0.0", 6633))  # os-ken's old default port: never bound
    assert listen(("127.0.0.1", port)) is listener
    with pytest.raises(RuntimeError):
        listen(("127.0.0.1", port))  # a second listener on the same address: refused too
