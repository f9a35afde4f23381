"""What other processes change is out of an experiment's reach, and it still counts the CPUs.

Each file here is a channel, shown by red teams (docs/reliability.md): /proc/stat's `processes`
line counts every thread the machine starts (a process starts N threads, the next reads N);
/proc/self/net is the whole network namespace (`net/sockstat` counts every socket: 1,200 bit/s
between two confined processes); /proc/meminfo and the CPUs' idle-state counters move with what
another process allocates or spins. Nothing a run needs reads them: glibc counts CPUs from
/sys/devices/system/cpu/{online,possible,present,kernel_max}, which stay granted. And an
evaluation process makes no pipe and no thread: a new pipe's inode number is the kernel's
counter, and a new thread's id the pid counter, which the next process reads back the same
way. No stage may watch files (inotify told a training process each time another run's
evaluation opened a file), and an evaluation process takes no file lock (a lock on a file every
run reads is a bit) and sets no priority of its own (any process reads another's). No stage
reads another process's CPU clock (a process moves its own by computing). Both stages are
checked in one real sandboxed run through the real trainer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bus.messages import RunStatus
from tests.training_helpers import CHAMPION, patch_for, run
from training.corpus import Corpus
from training.sandbox import landlock_abi

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the grant is Landlock's")

# Run first in train(): whether each file opens, and how many CPUs the process sees.
COUNTERS = [
    "/proc/stat",
    "/proc/self/net/sockstat",
    "/proc/self/status",
    "/proc/meminfo",
    "/sys/devices/system/cpu/cpu0/cpuidle/state0/usage",
]
PROBE = f"""    import os

    def probe():
        found = []
        for path in {COUNTERS!r}:
            try:
                open(path).close()
                found.append("readable")
            except OSError as exc:
                found.append(f"{{type(exc).__name__}} {{exc.errno}}")
        try:  # a new pipe reads the kernel's inode counter (fstat), and moves it
            os.close(os.pipe()[0])
            pipe = "made"
        except OSError as exc:
            pipe = f"{{type(exc).__name__}} {{exc.errno}}"
        try:  # a new thread takes the next number of the machine's pid counter
            import threading

            threading.Thread(target=lambda: None).start()
            thread = "started"
        except RuntimeError as exc:
            thread = f"{{type(exc).__name__}} {{exc}}"
        import ctypes
        import fcntl

        libc = ctypes.CDLL(None, use_errno=True)  # inotify: told when others open a file
        watch = "made" if libc.inotify_init1(0) >= 0 else f"errno {{ctypes.get_errno()}}"
        try:  # a lock on a file every run may read is a bit others can test
            with open(os.__file__) as shared:
                fcntl.flock(shared, fcntl.LOCK_SH | fcntl.LOCK_NB)
            lock = "taken"
        except OSError as exc:
            lock = f"{{type(exc).__name__}} {{exc.errno}}"
        try:  # any process reads another's priority: a value set is a message
            os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0))
            nice = "set"
        except OSError as exc:
            nice = f"{{type(exc).__name__}} {{exc.errno}}"
        import time

        def cpu_clock(pid):  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
            try:
                time.clock_gettime(((~pid) << 3) | 2)
                return "read"
            except OSError as exc:
                return f"errno {{exc.errno}}"

        # another process's CPU time moves as it computes: what it spins is a message
        clock = f"{{cpu_clock(os.getpid())}}/{{cpu_clock(os.getppid())}}"
        cpus = f"CPUS {{os.cpu_count()}} {{len(os.sched_getaffinity(0))}}"
        kernel = f"PIPE {{pipe}} THREAD {{thread}} WATCH {{watch}} LOCK {{lock}} NICE {{nice}}"
        return f"COUNTERS {{found}} {{cpus}} {{kernel}} CLOCK {{clock}}"

    print(probe(), flush=True)
"""
# The trained model probes again in the evaluation process as it is loaded, and fails there so
# that what it found is the run's reason (a load error is the one thing of it that is kept).
PROBES_WHEN_LOADED = """    class Prober(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def __setstate__(self, state):
            raise ValueError(probe())

        def forward(self, x):
            return self.model(x)

    return Prober()
"""
RECIPE = CHAMPION.replace("def train(ctx):\n", "def train(ctx):\n" + PROBE, 1).replace(
    "    return model\n", PROBES_WHEN_LOADED, 1
)


def test_no_stage_reads_or_watches_what_others_do_and_evaluation_leaves_no_trace(
    corpus: Corpus, tmp_path: Path
) -> None:
    result = run(corpus, tmp_path, patch_for(RECIPE), seed=7)
    # EACCES from Landlock for each (ENOENT where this machine has no such file); the CPU
    # count is the unconfined one, read from what is granted.
    denied = [
        "PermissionError 13" if os.path.exists(path) else "FileNotFoundError 2" for path in COUNTERS
    ]
    cpus = f"CPUS {os.cpu_count()} {len(os.sched_getaffinity(0))}"
    expected = f"COUNTERS {denied} {cpus}"
    # training makes pipes and threads and takes locks (torch may); an evaluation process, which
    # talks only over the pipes it was given, computes on one thread and writes nothing, may not;
    # neither may watch files (EPERM from seccomp)
    clock = "CLOCK read/errno 1"  # its own CPU time, not another process's
    in_training = f"{expected} PIPE made THREAD started WATCH errno 1 LOCK taken NICE set {clock}"
    assert in_training in result.log_tail, result.log_tail[-1500:]
    assert result.status == RunStatus.CRASH, (result.reason, result.log_tail[-1500:])
    in_evaluation = (
        f"ValueError: {expected} PIPE PermissionError 1 THREAD RuntimeError can't start new thread"
        f" WATCH errno 1 LOCK PermissionError 1 NICE PermissionError 1 {clock}"
    )
    assert result.reason.endswith(in_evaluation), result.reason
