"""Confining experiment code: rlimits, a scrubbed environment, Landlock and seccomp.

Applied in the experiment's own process, before any recipe code is imported:
- Landlock (Linux ≥ 5.13, no privileges needed): the process may read only its Python (less
  the stdlib modules the bytelm corpus is made of), site-packages, the shared libraries the
  loader may load (file by file), the `training` package and a few system paths; so no copy of
  the corpus, train or val, is readable: not the interpreter's, not another Python's in /usr/lib
  or /usr/local/lib (readable_paths.py). It may write only its scratch directory; TCP
  bind/connect are denied (no bus, no network); it cannot signal processes outside itself.
- seccomp (syscall_rules.py): no fork, vfork or exec (threads are allowed), so no fork bombs
  and no shell-outs; no socket() at all (Landlock only covers TCP; a socketpair, connected to
  nothing but itself, is allowed), no memfd on the CPU (memory outside the address-space
  limit); on CUDA a Unix socket and a memfd, which its driver makes at start, but never
  connect(); no bind() or listen() on the CPU (an abstract Unix name is a message other
  processes can read), no watching files (inotify, fanotify), no change to another process's
  scheduling (nice, policy, affinity, I/O priority) and no reading of its CPU clock, no new
  pipe, thread, perf event, file lock or priority of its own in an evaluation process
  (counters and state another process reads),
  no io_uring (it would bypass these checks), no new namespace, no rlimit set on another
  process, no SysV IPC, POSIX message queue, keyring or memfd_secret (state that outlives the
  run), no probing or evicting the page cache (mincore, cachestat, fadvise, readahead,
  preadv2/pwritev2, madvise COLD/PAGEOUT: a memory shared with other runs), and no syscall of
  another ABI (i386 or x32).
- capabilities: all dropped, so an experiment run by root cannot raise its rlimits.
- rlimits (set between fork and exec by the runner): address space, file size, open files,
  processes. The scratch directory's total size is the runner's to watch (`Limits.disk_bytes`).
Where the kernel lacks Landlock or seccomp, the rest still applies and the experiment's log says
so (its first line: `sandbox: ...`).
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Re-exported: the harness confines its processes with sandbox.* alone.
from training.readable_paths import device_paths as device_paths
from training.readable_paths import python_read_paths as python_read_paths
from training.syscall_rules import ABIS, no_new_privs
from training.syscall_rules import COMMAND as COMMAND
from training.syscall_rules import EVALUATION as EVALUATION
from training.syscall_rules import EXPERIMENT as EXPERIMENT
from training.syscall_rules import GPU_EXPERIMENT as GPU_EXPERIMENT
from training.syscall_rules import SyscallRules as SyscallRules
from training.syscall_rules import restrict_syscalls as restrict_syscalls

# Environment variables an experiment may see; everything else (API keys, tokens, NATS
# credentials) is dropped. LD_LIBRARY_PATH: where a GPU machine's driver library may be found.
ENV_ALLOWED = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
)


@dataclass(frozen=True, slots=True)
class Limits:
    address_space_bytes: int = 4 * 1024**3  # virtual: torch on CPU maps ~1.5 GiB at start
    file_size_bytes: int = 256 * 1024**2  # each file the experiment writes, its log included
    open_files: int = 1024  # bounds what pipes and socket buffers can hold
    processes: int = 256  # per user, as the kernel counts them (root is exempt; seccomp is not)
    # The whole scratch directory, checked by the runner while the experiment runs (no rlimit
    # covers many files, or files deleted but held open); it may overshoot by what can be written
    # in one check interval.
    disk_bytes: int = 1024**3
    disk_files: int = 10_000


def die_with_parent() -> None:
    """A trainer killed by SIGKILL must not leave its experiment (or fork server) running."""
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL


def set_rlimits(limits: Limits) -> None:
    """preexec_fn (between fork and exec), or in a fork of the zygote."""
    die_with_parent()
    if limits.address_space_bytes > 0:  # 0: none (CUDA, see swarm/training_setup.py)
        _lower(resource.RLIMIT_AS, limits.address_space_bytes)
    _lower(resource.RLIMIT_FSIZE, limits.file_size_bytes)
    _lower(resource.RLIMIT_NOFILE, limits.open_files)
    _lower(resource.RLIMIT_NPROC, limits.processes)
    _lower(resource.RLIMIT_CORE, 0)


def _lower(kind: int, value: int) -> None:
    """Set soft and hard limit to `value`, or keep a lower hard limit the trainer already has
    (raising it would fail without privileges)."""
    hard = resource.getrlimit(kind)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


def drop_capabilities() -> str:
    """Drop every capability of this thread (and of the threads it starts): a trainer running as
    root would otherwise leave its experiment CAP_SYS_RESOURCE, with which it could raise its own
    rlimits. No exec follows (seccomp), so none come back."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = struct.pack("<Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = bytes(2 * 12)  # two {effective, permitted, inheritable} u32 triples, all empty
    if libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)) != 0:
        return f"capabilities kept: {os.strerror(ctypes.get_errno())}"
    return "no capabilities"


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


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none."""
    return _landlock_abi(ctypes.CDLL(None, use_errno=True))


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
    if abi >= 9:  # Linux 7.1
        # RESOLVE_UNIX: connect (or send by address) to a pathname Unix socket only under a
        # writable path, or one made inside the sandbox. A command's toolchain keeps its own
        # sockets (multiprocessing's forkserver, torch's DataLoader workers pass fds through
        # one in its temp folder), while a service outside (a container runtime's socket,
        # D-Bus) is out of reach. Below ABI 9 no Landlock right covers it (docs/reliability.md).
        rights |= 1 << 16
    return rights


UNSAFE_FLAG = "--unsafe-no-sandbox"


def missing_confinement() -> list[str]:
    """What of the sandbox this machine cannot apply: untrusted code does not run without it
    unless the user says so (UNSAFE_FLAG), since it would run with the trainer's reach."""
    missing = []
    if landlock_abi() < 1:
        missing.append("Landlock (Linux 5.13 or later, enabled in the kernel's LSM list)")
    if platform.machine() not in ABIS:
        missing.append(f"the seccomp filter (x86_64 or aarch64; this is {platform.machine()})")
    return missing


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
        no_new_privs(libc)
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
