"""What the sandbox grants an experiment on CUDA, checked on the CPU (issue 16, item 6).

On an H100 (driver 580) CUDA failed to start inside the sandbox (error 304) until the experiment
could make Unix sockets and write its own threads' names in /proc; bench/cuda_sandbox.py shows
which grant each failure needed, and docs/reliability.md has the figures. These tests check,
in real confined processes, that the CUDA rules give exactly that and nothing more: no child
process, no program run, no network socket, no new namespace."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from training import sandbox
from training.readable_paths import CUDA_READ_PATHS, python_read_paths

pytestmark = pytest.mark.skipif(
    sandbox.missing_confinement() != [], reason="needs Landlock and seccomp"
)

ATTEMPTS = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    try:
        call()
        print(name, "allowed")
    except OSError as exc:
        print(name, "denied" if exc.errno == 1 else f"errno {exc.errno}")
def memfd():
    if libc.memfd_create(b"x", 0) < 0:
        raise OSError(ctypes.get_errno(), "memfd_create")
def unshare():
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare")
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
attempt("unix socket", lambda: socket.socket(socket.AF_UNIX).close())
def reach():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(OUTSIDE)
attempt("unix connect", reach)
def datagram():
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(b"forged log line", OUTSIDE_DGRAM)
attempt("datagram by address", datagram)
def by_message():
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendmsg([b"forged log line"], [], 0, OUTSIDE_DGRAM)
attempt("datagram by message", by_message)
def own_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.send(b"x")
    assert b.recv(1) == b"x"
    a.close(), b.close()
attempt("own socket pair", own_pair)
def publish():
    a, b = socket.socketpair()
    try:
        a.bind(b"\\0research-swarm-red-team-" + os.urandom(4).hex().encode())
    finally:
        a.close(), b.close()
attempt("abstract name", publish)
attempt("udp socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
attempt("memfd", memfd)
attempt("fork", fork)
attempt("exec", lambda: os.execv("/bin/true", ["/bin/true"]))
attempt("unshare", unshare)
"""


def _confined(rules: str, tmp_path: Path) -> dict[str, str]:
    """What a process confined by `rules` may do, against a Unix socket listening outside it
    (where a container runtime's or an agent's would be)."""
    path, dgram = tmp_path / "outside.sock", tmp_path / "outside-dgram.sock"
    with (
        socket.socket(socket.AF_UNIX) as server,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as log,
    ):
        server.bind(str(path))
        server.listen()
        log.bind(str(dgram))  # where syslog's would be
        code = (
            f"from training import sandbox\nsandbox.restrict_syscalls(sandbox.{rules})\n"
            f"OUTSIDE = {str(path)!r}\nOUTSIDE_DGRAM = {str(dgram)!r}\n{ATTEMPTS}"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        log.setblocking(False)
        try:
            reached = log.recv(100)
        except BlockingIOError:
            reached = b""
        assert not reached, reached
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def test_cuda_experiments_may_make_unix_sockets_and_memfds_and_nothing_more(
    tmp_path: Path,
) -> None:
    assert _confined("GPU_EXPERIMENT", tmp_path) == {
        "unix socket": "allowed",  # without it the driver's start fails (error 304)
        "unix connect": "denied",  # ... but it needs none connected (checked on an H200)
        "datagram by address": "denied",  # nor any datagram sent out (syslog's socket)
        "datagram by message": "denied",
        "own socket pair": "allowed",  # a pair is connected to nothing but itself
        "abstract name": "allowed",  # open until a GPU shows CUDA starts without bind
        "udp socket": "denied",
        "memfd": "allowed",
        "fork": "denied",
        "exec": "denied",
        "unshare": "denied",
    }


def test_cpu_experiments_keep_every_denial(tmp_path: Path) -> None:
    confined = _confined("EXPERIMENT", tmp_path)
    assert confined.pop("own socket pair") == "allowed"
    assert set(confined.values()) == {"denied"}


def test_cuda_grants_name_the_device_files_and_the_own_threads_only() -> None:
    assert sandbox.device_paths("cpu") == ([], [])
    read, write = sandbox.device_paths("cuda")
    assert [str(p) for p in read] == list(CUDA_READ_PATHS)
    assert not any(str(p) == "/dev" or str(p).startswith("/dev/") for p in read)  # the disks
    assert Path("/proc/self/task") in write
    assert all(str(p).startswith("/dev/nvidia") for p in write if p != Path("/proc/self/task"))


NAME_A_THREAD = """
import sys, threading
from pathlib import Path
from training import sandbox
write = [Path("/proc/self/task")] if sys.argv[1] == "granted" else []
print(sandbox.restrict_filesystem(sandbox.python_read_paths(), write, reads_all=False))
started, stop = threading.Event(), threading.Event()
def worker():
    started.set()
    stop.wait()
thread = threading.Thread(target=worker)
thread.start()
started.wait()
try:  # what CUDA's driver does for each thread it starts
    Path(f"/proc/self/task/{thread.native_id}/comm").write_text("cuda-worker")
    print(Path(f"/proc/self/task/{thread.native_id}/comm").read_text().strip())
except PermissionError:
    print("denied")
try:  # the grant is this process's threads, not /proc
    Path("/proc/1/comm").read_text()
    print("reads /proc/1")
except PermissionError:
    print("/proc/1 denied")
stop.set()
"""


@pytest.mark.parametrize(("grant", "named"), [("granted", "cuda-worker"), ("none", "denied")])
def test_an_experiment_names_its_own_threads_only_where_cuda_is_granted_it(
    grant: str, named: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", NAME_A_THREAD, grant],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out[0].startswith("landlock abi")
    assert out[1:] == [named, "/proc/1 denied"]


def test_libraries_on_ld_library_path_are_readable_and_the_path_is_passed_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU machine's driver (libcuda.so.1) is often found only through LD_LIBRARY_PATH."""
    libs = tmp_path / "nvidia" / "lib64"
    libs.mkdir(parents=True)
    (libs / "libcuda.so.1").write_bytes(b"\x7fELF")
    (libs / "notes.txt").write_text("not a library")
    # a red team's tricks: a link named like a library to a source file, a name with .so in it
    corpus_copy = tmp_path / "turtle.py"
    corpus_copy.write_text("# a copy of a corpus module\n")
    (libs / "libturtle.so").symlink_to(corpus_copy)
    (libs / "mailbox.so.py").write_text("# another\n")
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "librel.so").write_bytes(b"\x7fELF")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{libs}:/nonexistent:rel")
    granted = python_read_paths()
    assert libs.resolve() / "libcuda.so.1" in granted
    names = {p.name for p in granted}
    assert not {"notes.txt", "libturtle.so", "turtle.py", "mailbox.so.py", "librel.so"} & names
    assert libs.resolve() not in granted
    assert (
        sandbox.scrubbed_env(None, {}, cpu=False)["LD_LIBRARY_PATH"] == f"{libs}:/nonexistent:rel"
    )
