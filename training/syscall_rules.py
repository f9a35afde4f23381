"""The seccomp half of the sandbox (training/sandbox.py has the rest): which syscalls a confined
process may make, per kind of process (SyscallRules), as a BPF filter over each ABI's numbers.

Denied in every mode: io_uring, new namespaces, SysV IPC, POSIX message queues, keyrings,
memfd_secret, rlimits on other processes and any other ABI. Each rule's comment says what a
red team did with it.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from dataclasses import dataclass


def no_new_privs(libc: ctypes.CDLL) -> None:
    """Required before an unprivileged process may install a filter or a Landlock ruleset."""
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS


@dataclass(frozen=True, slots=True)
class _Abi:
    arch: int  # AUDIT_ARCH_* of the native ABI; any other ABI is denied whole
    forks: tuple[int, ...]  # fork, vfork (clone is filtered by its flags)
    execs: tuple[int, ...]  # execve, execveat
    io_uring: int  # io_uring_setup: denied in every mode (it would bypass these checks)
    memfd: int  # memfd_create
    clone: int
    clone3: int
    socket: int
    x32: bool  # x86_64: syscall numbers with bit 30 set are the x32 ABI, same arch id
    namespaces: tuple[int, ...] = ()  # unshare, setns: denied in every mode
    # SysV shared memory, semaphores and message queues, POSIX message queues (mq_open,
    # mq_unlink; Landlock refuses them too, as a path outside its grants), the kernel keyrings
    # and memfd_secret: state outside the run's folder and limits that outlives it (a red team
    # left a 64 MiB segment behind, passed messages between runs, and read a key another
    # process stored). Denied in every mode.
    shared_state: tuple[int, ...] = ()
    prlimit: int = -1  # prlimit64: allowed on the process itself only (pid 0)
    connect: int = -1
    binds: tuple[int, ...] = ()  # bind, listen
    sendto: int = -1  # without connects: only on a connected socket (no address given)
    sends_by_message: tuple[int, ...] = ()  # sendmsg, sendmmsg: an address the filter cannot read
    # What reads or steers the page cache: mincore, cachestat, fadvise64, readahead, preadv2 and
    # pwritev2 (RWF_NOWAIT tells a cached page), and madvise's COLD and PAGEOUT. A red team made
    # the cache of readable files a memory shared by evaluation processes and later runs (a
    # page cached or evicted is a bit). Denied to experiments of ours; timing still tells a
    # cached page, but nothing can evict one at will.
    page_cache: tuple[int, ...] = ()
    madvise: int = -1
    # pipe, pipe2, socketpair, userfaultfd: each takes an inode number from the kernel's one
    # counter (get_next_ino), which any process reads back with fstat on a pipe it makes (below);
    # perf_event_open: each event takes the next id of one machine-wide counter, which a later
    # process reads back exactly (a red team: 3 of 3 hand-offs)
    new_inodes: tuple[int, ...] = ()
    # inotify_init, inotify_init1, inotify_add_watch, fanotify_init, fanotify_mark (a mark on
    # one file needs no privilege since Linux 5.13): told at once when any process opens or
    # reads a file this one may read (and fcntl's F_NOTIFY, the older form, on a folder)
    watches: tuple[int, ...] = ()
    flock: int = -1  # and fcntl's lock commands: a lock on a readable file, seen by anyone
    fcntl: int = -1
    # What sets a process's scheduling, each as (number, its `which` argument's value for "a
    # process" or -1 where it has none, the index of its pid argument): setpriority,
    # sched_setparam, sched_setscheduler, sched_setaffinity, sched_setattr, ioprio_set. Allowed
    # on the process itself only (pid 0, or its own) but on CUDA: a red team's experiment
    # reniced, idled and pinned another run's process (none holds a capability, so the kernel
    # let it), and PRIO_USER would renice every process of the trainer's user.
    scheduling: tuple[tuple[int, int, int], ...] = ()
    # What names a clock by its first argument: clock_gettime, clock_getres, clock_nanosleep,
    # timer_create, clock_adjtime. A negative id below -8 is another process's or thread's CPU
    # clock: a red team's evaluation process read a training process's CPU time as it spun in
    # timed bursts (8 of 8 bytes, both ways; no /proc needed, a missing pid answers EINVAL).
    clocks: tuple[int, ...] = ()


ABIS = {
    "x86_64": _Abi(
        0xC000003E,
        (57, 58),
        (59, 322),
        425,
        319,
        56,
        435,
        41,
        True,
        namespaces=(272, 308),
        prlimit=302,
        connect=42,
        binds=(49, 50),
        sendto=44,
        sends_by_message=(46, 307),
        shared_state=(
            *(29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71),  # shm, sem, msg
            *(240, 241, 248, 249, 250, 447),  # mq; keys; memfd_secret
        ),
        page_cache=(27, 451, 221, 187, 327, 328),
        madvise=28,
        new_inodes=(22, 293, 53, 323, 298),
        watches=(253, 294, 254, 300, 301),
        flock=73,
        fcntl=72,
        scheduling=(
            (141, 0, 1),
            (142, -1, 0),
            (144, -1, 0),
            (203, -1, 0),
            (314, -1, 0),
            (251, 1, 1),
        ),
        clocks=(228, 229, 230, 222, 305),
    ),
    "aarch64": _Abi(
        0xC00000B7,
        (),
        (221, 281),
        425,
        279,
        220,
        435,
        198,
        False,
        namespaces=(97, 268),
        prlimit=261,
        connect=203,
        binds=(200, 201),
        sendto=206,
        sends_by_message=(211, 269),
        shared_state=(180, 181, *range(186, 198), 217, 218, 219, 447),  # mq, msg, sem, shm; keys
        page_cache=(232, 451, 223, 213, 286, 287),
        madvise=233,
        new_inodes=(59, 199, 282, 241),
        watches=(26, 27, 262, 263),
        flock=32,
        fcntl=25,
        scheduling=(
            (140, 0, 1),
            (118, -1, 0),
            (119, -1, 0),
            (122, -1, 0),
            (274, -1, 0),
            (30, 1, 1),
        ),
        clocks=(113, 114, 115, 107, 266),
    ),
}
_AF_UNIX, _CLONE_THREAD = 1, 0x00010000
# fcntl commands: F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW set a lock others can test;
# F_SETLEASE and F_NOTIFY tell this process what others do to a file or a folder
_F_LOCKS, _F_WATCHES = (6, 7, 37, 38), (1024, 1026)
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: a new namespace of any kind
# (a user namespace grants every capability inside it, and a new network one, its own stack)
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
_CLONE_NAMESPACES |= 0x20000000 | 0x40000000


@dataclass(frozen=True, slots=True)
class SyscallRules:
    """What a confined process may do besides computing and using what it was given; each
    field allows one group of syscalls. New namespaces, io_uring, SysV IPC, POSIX message
    queues, keyrings, memfd_secret, rlimits on other processes and other ABIs are denied in
    every mode."""

    forks: bool = False  # fork, vfork, clone without CLONE_THREAD: child processes
    execs: bool = False  # execve, execveat: running programs
    memfd: bool = False  # memfd_create: memory outside the address-space limit
    unix_sockets: bool = False  # socket(AF_UNIX); any other socket is denied in every mode
    # connect(), and a datagram sent by address (sendto with one, sendmsg, sendmmsg): with Unix
    # sockets allowed, a pathname socket anywhere the user can reach (a container runtime's, an
    # agent's, syslog's) would be reachable: Landlock has no rule for it
    connects: bool = True
    # bind(), listen(): a name other processes can find. An abstract Unix name needs no file,
    # so Landlock cannot stop it, and its very existence is a message: a red team published
    # bytes as names from one confined run and read them in another (from /proc/net/unix, or
    # by binding the name and getting "in use"), the evaluation stage included.
    binds: bool = True
    page_cache: bool = False  # probing or evicting the page cache (see _Abi.page_cache)
    # New pipes and socket pairs. Each takes the next number of the kernel's inode counter, and
    # a process that makes one reads where the counter stands: a red team's evaluation process
    # made pipes until the number said a byte of its windows (mod 256), and the next process,
    # forked after, made one and read it (35 of 39 bytes exact). The evaluation stage, which
    # talks only over the pipes it was given, makes none. Perf events go with them: each takes
    # the next id of one machine-wide counter (_Abi.new_inodes).
    new_pipes: bool = True
    # Threads (clone with CLONE_THREAD; `forks` allows them too). Each takes the next number of
    # the machine's pid counter, which any later process reads as its own pid or a thread's id:
    # the same channel as the inode counter's. Torch on the CPU, held to one thread, starts none
    # to load a model and answer a batch, so an evaluation process needs none.
    threads: bool = True
    # Watching files: inotify, fanotify, and fcntl's F_NOTIFY and F_SETLEASE. A confined training
    # process watched a file every stage may read and was told at once when a confined
    # evaluation process (another run's) opened it: which file is the message (a probe of ours,
    # docs/reliability.md).
    watches: bool = False
    # File locks: flock, and fcntl's lock commands. A lock on a file both may read is a bit
    # another process tests without waiting (the same probe). Training keeps them (a compile
    # cache locks its files); the evaluation, which writes nothing, needs none.
    locks: bool = True
    # Changing its own scheduling (nice, policy, CPU affinity, I/O priority). Any process may
    # read another's, so a value it sets is a message: a red team's evaluation process wrote 13
    # bits at a time in its I/O priority for a training process on the other trainer, 4 KiB in
    # 0.09 s with no error. The evaluation needs none of it; no CPU mode may change another's.
    scheduling: bool = True
    # ...and another process's (CUDA only, until a GPU shows its driver starts without it:
    # bench/cuda_sandbox.py, "own scheduling")
    others_scheduling: bool = False
    # Reading another process's or thread's CPU clock (its CPU time, to the nanosecond). A
    # process moves its own just by computing, so what another reads is a message, both ways
    # (_Abi.clocks). Its own clocks, and the system's, stay readable.
    others_clocks: bool = False


# An experiment of ours on the CPU: threads, and the pipes and files it was given.
EXPERIMENT = SyscallRules(binds=False)
# Its evaluation processes: the same, and no new pipe, thread or perf event (the kernel's
# counters), no file lock and no scheduling of its own (state any other process reads).
EVALUATION = SyscallRules(
    binds=False, new_pipes=False, threads=False, locks=False, scheduling=False
)
# On CUDA: the driver makes a Unix socket at start and fails (error 304) without it (seen on an
# H100, driver 580; memfd on driver 570 in a public report; bench/cuda_sandbox.py tells which a
# machine's driver needs). It may neither connect one nor send by address: nothing outside is
# reachable through it. (CUDA started on an H200 with connect denied; with the sends denied too
# it has not yet run on a GPU: bench/cuda_sandbox.py checks it.)
# CUDA experiments have no address-space limit for a memfd to escape, and exec stays denied.
# bind stays allowed until a GPU shows CUDA starts without it (bench/cuda_sandbox.py, "no bind").
GPU_EXPERIMENT = SyscallRules(
    memfd=True,
    unix_sockets=True,
    connects=False,
    watches=True,
    others_scheduling=True,
    others_clocks=True,
)
# A command target runs a shell and its toolchain (which keeps Unix sockets).
COMMAND = SyscallRules(
    forks=True,
    execs=True,
    memfd=True,
    unix_sockets=True,
    page_cache=True,
    watches=True,
    others_clocks=True,
)


def restrict_syscalls(rules: SyscallRules = EXPERIMENT) -> str:
    """Apply a seccomp filter to this process and its threads: deny what `rules` does not allow,
    and every syscall made through another ABI (on x86_64, `int 0x80` reaches the i386 table,
    where fork is 2, which a filter on x86_64 numbers alone lets by). Landlock bars TCP only:
    without the socket rule a UDP packet leaves the machine. No new namespace (unshare, setns,
    clone with CLONE_NEW*: a user namespace would give the experiment every capability inside
    it) and no rlimit on another process (prlimit64 with a pid: a red team set the CPU limit of
    a process outside to 1 s and it died)."""
    abi = ABIS.get(platform.machine())
    if abi is None:
        return "seccomp unavailable"
    deny, enosys, allow = 0x00050000 | 1, 0x00050000 | 38, 0x7FFF0000  # ERRNO(EPERM), (ENOSYS)
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ/JGE/JSET|K
    nr, arch, arg0 = 0, 4, 16  # offsets in struct seccomp_data (arg0: its low half)
    prog = [(ld, 0, 0, arch), (jeq, 1, 0, abi.arch), (ret, 0, 0, deny), (ld, 0, 0, nr)]
    if abi.x32:
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, deny)]
    denied = [abi.io_uring, *abi.namespaces, *abi.shared_state]
    denied += [*abi.forks] if not rules.forks else []
    denied += [*abi.execs] if not rules.execs else []
    denied += [abi.memfd] if not rules.memfd else []
    denied += [*abi.page_cache] if not rules.page_cache else []
    denied += [abi.connect, *abi.sends_by_message] if not rules.connects else []
    denied += [*abi.binds] if not rules.binds else []
    denied += [*abi.new_inodes] if not rules.new_pipes else []
    denied += [abi.clone] if not (rules.threads or rules.forks) else []
    denied += [*abi.watches] if not rules.watches else []
    denied += [abi.flock] if not rules.locks else []
    denied += [number for number, _, _ in abi.scheduling] if not rules.scheduling else []
    for number in denied:
        prog += [(jeq, 0, 1, number), (ret, 0, 0, deny)]
    # clone3 passes its flags in memory the filter cannot read: say "not implemented" so libc
    # falls back to clone, whose flags it can check.
    prog += [(jeq, 0, 1, abi.clone3), (ret, 0, 0, enosys)]
    # clone: never a new namespace; without `forks`, only a thread.
    thread = [(jset, 1, 0, _CLONE_THREAD), (ret, 0, 0, deny)] if not rules.forks else []
    prog += [(jeq, 0, 4 + len(thread), abi.clone), (ld, 0, 0, arg0)]
    prog += [(jset, 0, 1, _CLONE_NAMESPACES), (ret, 0, 0, deny), *thread, (ret, 0, 0, allow)]
    prog += [(ld, 0, 0, nr)]
    # The scheduling calls: only on itself (its `which` is "a process", its pid 0 or its own).
    own = os.getpid()
    for number, which, pid in abi.scheduling if not rules.others_scheduling else ():
        check = [(ld, 0, 0, arg0), (jeq, 0, 4, which)] if which >= 0 else []  # else deny
        prog += [(jeq, 0, 5 + len(check), number), *check, (ld, 0, 0, arg0 + 8 * pid)]
        prog += [(jeq, 1, 0, 0), (jeq, 0, 1, own), (ret, 0, 0, allow), (ret, 0, 0, deny)]
        prog += [(ld, 0, 0, nr)]
    # A clock: the system's (ids from 0), its own process's and thread's CPU clocks (-8..-1),
    # and its own process's by pid (glibc's clock_getcpuclockid(getpid()) makes one); another
    # process's or thread's CPU clock is denied. The kernel reads the id as an int: its low half.
    mine = ((~own) << 3) & 0xFFFFFFFF  # MAKE_PROCESS_CPUCLOCK(own pid, 0): 8 ids from here
    for number in abi.clocks if not rules.others_clocks else ():
        prog += [(jeq, 0, 7, number), (ld, 0, 0, arg0), (jge, 0, 4, 0x80000000)]
        prog += [(jge, 3, 0, 0xFFFFFFF8), (jge, 0, 1, mine), (jge, 0, 1, mine + 8)]
        prog += [(ret, 0, 0, deny), (ret, 0, 0, allow), (ld, 0, 0, nr)]
    # prlimit64: only on itself (pid 0), as setrlimit and getrlimit call it.
    prog += [(jeq, 0, 4, abi.prlimit), (ld, 0, 0, arg0), (jeq, 0, 1, 0)]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    if not rules.connects:  # sendto: only without an address (both halves of its 5th argument)
        prog += [(jeq, 0, 6, abi.sendto), (ld, 0, 0, arg0 + 32), (jeq, 0, 3, 0)]
        prog += [(ld, 0, 0, arg0 + 36), (jeq, 0, 1, 0), (ret, 0, 0, allow), (ret, 0, 0, deny)]
        prog += [(ld, 0, 0, nr)]
    commands = (*(_F_WATCHES if not rules.watches else ()), *(_F_LOCKS if not rules.locks else ()))
    if commands:  # fcntl: all but these commands (its second argument)
        prog += [(jeq, 0, 3 + len(commands), abi.fcntl), (ld, 0, 0, arg0 + 8)]
        prog += [(jeq, len(commands) - i, 0, cmd) for i, cmd in enumerate(commands)]
        prog += [(ret, 0, 0, allow), (ret, 0, 0, deny), (ld, 0, 0, nr)]
    if not rules.page_cache:  # madvise: all but MADV_COLD (20) and MADV_PAGEOUT (21), which evict
        prog += [(jeq, 0, 5, abi.madvise), (ld, 0, 0, arg0 + 16), (jeq, 2, 0, 20), (jeq, 1, 0, 21)]
        prog += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    # socket: none at all for an experiment of ours (it talks to the runner over pipes it was
    # given); Unix ones only for a command's toolchain.
    if rules.unix_sockets:
        prog += [(jeq, 0, 4, abi.socket), (ld, 0, 0, arg0), (jeq, 0, 1, _AF_UNIX)]
        prog += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    else:
        prog += [(jeq, 0, 1, abi.socket), (ret, 0, 0, deny)]
    prog += [(ret, 0, 0, allow)]
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buffer = ctypes.create_string_buffer(raw)
    fprog = struct.pack("<HxxxxxxQ", len(prog), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    no_new_privs(libc)
    if libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        return f"seccomp refused: {os.strerror(ctypes.get_errno())}"
    return "seccomp"
