"""Confining experiment code: rlimits, a scrubbed environment, Landlock and seccomp.

Applied in the experiment's own process, before any recipe code is imported:
- Landlock (Linux ≥ 5.13, no privileges needed): the process may read only the Python install
  (minus the stdlib packages that hold the val split), the `training` package and a few system
  paths; it may write only its scratch directory; TCP bind/connect are denied (no bus, no
  network); it cannot signal processes outside itself.
- seccomp: no fork, vfork or exec (threads are allowed), so no fork bombs and no shell-outs.
- rlimits (set between fork and exec by the runner): address space, file size, processes.
Where the kernel lacks Landlock or seccomp, the rest still applies and `status()` says so.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import struct
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Stdlib packages whose sources form the bytelm val split: never imported by torch or the
# harness, so the experiment process can be denied reading them.
VAL_PACKAGES = (
    "idlelib",
    "tkinter",
    "turtledemo",
    "lib2to3",
    "pydoc_data",
    "curses",
    "dbm",
    "wsgiref",
    "xmlrpc",
    "ensurepip",
    "msilib",
)

# Environment variables an experiment may see; everything else (API keys, tokens, NATS
# credentials) is dropped.
ENV_ALLOWED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True, slots=True)
class Limits:
    address_space_bytes: int = 4 * 1024**3  # virtual: torch on CPU maps ~1.5 GiB at start
    file_size_bytes: int = 256 * 1024**2
    processes: int = 256  # per user, as the kernel counts them (root is exempt; seccomp is not)


def die_with_parent() -> None:
    """A trainer killed by SIGKILL must not leave its experiment (or fork server) running."""
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL


def set_rlimits(limits: Limits) -> None:
    """preexec_fn (between fork and exec), or in a fork of the zygote."""
    die_with_parent()
    resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes,) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def scrubbed_env(scratch: Path | None, extra: dict[str, str], cpu: bool) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOWED if k in os.environ}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    if scratch is not None:
        env.update(HOME=str(scratch), TMPDIR=str(scratch))
    if cpu:  # one thread per trainer on CPU: more only oversubscribes the cores
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.update(extra)
    return env


# --- Landlock -------------------------------------------------------------------------------

_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_WRITES = sum(1 << b for b in (4, 5, 6, 7, 8, 9, 10, 11, 12))  # remove/make *
_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR


def _landlock_abi(libc: ctypes.CDLL) -> int:
    numbers = _SYS.get(platform.machine())
    if numbers is None:
        return 0
    abi = libc.syscall(numbers[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, int(abi))


def _fs_rights(abi: int) -> int:
    rights = _READ | _FS_WRITE_FILE | _FS_WRITES
    if abi >= 2:
        rights |= 1 << 13  # REFER
    if abi >= 3:
        rights |= 1 << 14  # TRUNCATE
    return rights


def restrict_filesystem(read: Iterable[Path], write: Iterable[Path], reads_all: bool) -> str:
    """Apply Landlock to this process. `reads_all` leaves reading unrestricted (the `command`
    target runs arbitrary toolchains) while still confining writes. Returns what applied."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = _landlock_abi(libc)
    if abi < 1:
        return "landlock unavailable"
    create, add_rule, restrict = _SYS[platform.machine()]
    rights = _fs_rights(abi)
    handled = rights & ~_READ if reads_all else rights
    net = 0b11 if abi >= 4 else 0  # BIND_TCP | CONNECT_TCP: handled with no rule = denied
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets and signals stay inside
    attr = struct.pack("<QQQ", handled, net, scoped)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    ruleset = libc.syscall(create, ctypes.c_char_p(attr[:size]), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        return f"landlock refused: {os.strerror(ctypes.get_errno())}"
    try:
        grants = [(p, _READ) for p in read] + [(p, rights) for p in write]
        for path, allowed in grants:
            _add_path_rule(libc, add_rule, ruleset, path, allowed & handled)
        _no_new_privs(libc)
        if libc.syscall(restrict, ruleset, 0) != 0:
            return f"landlock refused: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return f"landlock abi {abi}"


def _add_path_rule(
    libc: ctypes.CDLL, add_rule: int, ruleset: int, path: Path, allowed: int
) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path this machine does not have
    try:
        if not path.is_dir():
            allowed &= _FS_EXECUTE | _FS_READ_FILE | _FS_WRITE_FILE | (1 << 14)
        rule = struct.pack("<Qi", allowed, fd)  # struct landlock_path_beneath_attr, packed
        libc.syscall(add_rule, ruleset, 1, ctypes.c_char_p(rule), 0)
    finally:
        os.close(fd)


def _no_new_privs(libc: ctypes.CDLL) -> None:
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS


def python_read_paths(extra: Iterable[Path] = ()) -> list[Path]:
    """What a Python + torch process needs to read, without the val-split stdlib packages."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = [p for p in stdlib.iterdir() if p.name not in VAL_PACKAGES]
    for key in ("purelib", "platlib", "platstdlib"):
        paths.append(Path(sysconfig.get_paths()[key]))
    prefix_lib = Path(sys.base_prefix) / "lib"
    if prefix_lib.is_dir():
        paths += [p for p in prefix_lib.iterdir() if p != stdlib]
    paths += [Path(sys.executable).resolve().parent, Path(sys.base_prefix) / "bin"]
    for system in (
        "/usr/lib",
        "/usr/lib64",
        "/lib",
        "/lib64",
        "/usr/local/lib",
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/proc/self",
        "/proc/cpuinfo",
        "/proc/meminfo",
        "/proc/stat",
        "/sys/devices/system/cpu",
        "/dev/urandom",
    ):
        paths.append(Path(system))
    return [*paths, *extra]


# --- seccomp --------------------------------------------------------------------------------

_SECCOMP = {
    # arch audit id, fork, vfork, execve, execveat, clone, clone3
    "x86_64": (0xC000003E, 57, 58, 59, 322, 56, 435),
    "aarch64": (0xC00000B7, -1, -1, 221, 281, 220, 435),
}


def forbid_processes() -> str:
    """Deny fork/vfork/exec and non-thread clone to this process and its threads."""
    spec = _SECCOMP.get(platform.machine())
    if spec is None:
        return "seccomp unavailable"
    arch, fork, vfork, execve, execveat, clone, clone3 = spec
    errno_eperm, errno_enosys, allow = 0x00050000 | 1, 0x00050000 | 38, 0x7FFF0000
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    denied = [n for n in (fork, vfork, execve, execveat) if n >= 0]
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, allow), (ld, 0, 0, 0)]
    for number in denied:
        prog += [(jeq, 0, 1, number), (ret, 0, 0, errno_eperm)]
    # clone3 passes its flags in memory the filter cannot read: say "not implemented" so libc
    # falls back to clone, whose flags it can check.
    prog += [(jeq, 0, 1, clone3), (ret, 0, 0, errno_enosys)]
    prog += [(jeq, 0, 3, clone), (ld, 0, 0, 16), (jset, 1, 0, 0x00010000)]  # CLONE_THREAD?
    prog += [(ret, 0, 0, errno_eperm), (ret, 0, 0, allow)]
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buffer = ctypes.create_string_buffer(raw)
    fprog = struct.pack("<HxxxxxxQ", len(prog), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    _no_new_privs(libc)
    if libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        return f"seccomp refused: {os.strerror(ctypes.get_errno())}"
    return "seccomp"
