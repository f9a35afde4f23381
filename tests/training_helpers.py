"""Small experiments for tests: a tiny model, a tiny budget, patches made from edits."""

from __future__ import annotations

import difflib
import platform
from pathlib import Path

from bus.messages import BudgetKind, RunResult, RunSpec, RunStatus, new_id
from training.corpus import Corpus
from training.runner import RunLimits, run_bytelm
from training.sandbox import Limits
from training.spec_recipe import patched_or_refused
from training.targets import RECIPE

TINY_DIALS = {"depth": 1, "width": 32, "context": 16}
TINY_LIMITS = RunLimits(time_limit_s=60, eval_tokens=512)
CHAMPION = RECIPE.read_text()


def small_limits(status: RunStatus) -> RunLimits:
    """Small limits keep the tests quick (4 GiB of zeroed pages, or 1 GiB of disk, take long);
    a hang is given 2 s."""
    memory_and_disk = Limits(
        address_space_bytes=3 * 1024**3,
        file_size_bytes=32 * 2**20,
        disk_bytes=64 * 2**20,
        disk_files=1000,
    )
    time_limit = 2 if status == RunStatus.TIMEOUT else 60
    return RunLimits(time_limit_s=time_limit, eval_tokens=512, limits=memory_and_disk)


def patch_for(new_source: str, name: str = "recipe.py") -> str:
    return "".join(
        difflib.unified_diff(
            CHAMPION.splitlines(True), new_source.splitlines(True), f"a/{name}", f"b/{name}"
        )
    )


def edit(old: str, new: str) -> str:
    """A patch replacing `old` (which must occur in the champion) with `new`."""
    assert old in CHAMPION, old
    return patch_for(CHAMPION.replace(old, new, 1))


def inject(code: str) -> str:
    """A patch running `code` (indented for the body of train()) at the start of train()."""
    body = "".join(f"    {line}\n" for line in code.strip().splitlines())
    return edit("def train(ctx):\n", "def train(ctx):\n" + body)


def tiny_spec(
    patch: str = "", seed: int = 0, budget: float = 4096, kind: BudgetKind = BudgetKind.TOKENS
) -> RunSpec:
    return RunSpec(
        run_id=new_id("run"),
        tier=0,
        seed=seed,
        champion_version=1,
        budget_kind=kind,
        budget=budget,
        patch=patch,
        dials=dict(TINY_DIALS),
    )


def run(
    corpus: Corpus,
    scratch: Path,
    patch: str = "",
    limits: RunLimits = TINY_LIMITS,
    log_dir: Path | None = None,
    **spec: object,
) -> RunResult:
    run_spec = tiny_spec(patch, **spec)  # type: ignore[arg-type]
    recipe = patched_or_refused(run_spec, CHAMPION, "recipe.py", "cpu", "")
    if isinstance(recipe, RunResult):
        return recipe
    return run_bytelm(
        run_spec,
        recipe,
        corpus,
        limits,
        scratch,
        log_dir=log_dir,
    )


TINY_LADDER = """[[tier]]
name = "tiny"
depth = 1
width = 32
context = 16
budget_kind = "tokens"
budget = 4096
time_limit_s = 60
eval_tokens = 512
seeds = 1
"""


# Experiments that attack the sandbox: name -> (patch, status, words the reason must hold).
# Each must come back as that RunResult, with no metric; the runner's tests run them directly,
# the trainer's through a trainer on the bus. Hangs get a short time limit.
FORK_I386 = """
import ctypes, mmap, os
# mov eax, 2 (fork in the i386 table); int 0x80; the child exits (i386 exit); the parent returns
code = bytes.fromhex("b802000000cd8085c07509b80100000031dbcd80c3")
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
fork = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
pid = fork()
if pid < 0:
    raise OSError(-pid, os.strerror(-pid))
"""
ATTACKS: dict[str, tuple[str, RunStatus, str]] = {
    "hang": (inject("while True:\n    pass"), RunStatus.TIMEOUT, "wall-clock limit"),
    # Asks for batches and never reads the answers: the runner's writes would block for good.
    "protocol-flood": (
        inject(
            "import training.protocol as p\n"
            "while True:\n    p.write_all(ctx._req, b'B' + p.BATCH_ASK.pack(16, 16))"
        ),
        RunStatus.TIMEOUT,
        "wall-clock limit",
    ),
    "memory-bomb": (inject("hog = bytearray(64 * 1024**3)"), RunStatus.CRASH, "ran out of memory"),
    "memory-creep": (
        inject("hog = [torch.empty(2**28) for _ in range(64)]"),
        RunStatus.CRASH,
        "can't allocate memory",
    ),
    # A refusal for want of a sandbox, printed and exited with its code, by a recipe that ran
    # confined: the runner takes the refusal only over the pipe, before any recipe code.
    "forged-sandbox-refusal": (
        inject(
            "import sys\nfrom training.harness_child import NO_SANDBOX\n"
            "print(NO_SANDBOX + ' (landlock unavailable)', file=sys.stderr)\nsys.exit(4)"
        ),
        RunStatus.CRASH,
        "exit code 4",
    ),
    # A real-time signal to itself: `signal.Signals(40)` raised in the runner (a red team).
    "signal-40": (inject("import os\nos.kill(os.getpid(), 40)"), RunStatus.CRASH, "signal 40"),
    # Killed by SIGKILL from itself: it used to read as OOM.
    "self-sigkill": (
        inject("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
        RunStatus.CRASH,
        "killed by SIGKILL",
    ),
    # Evict a page from the cache (a bit of a memory shared with later runs; a red team).
    "page-cache-evict": (
        inject(
            "import os\nfd = os.open('recipe.py', os.O_RDONLY)\n"
            "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)"
        ),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    # Ask which pages of a file are cached (mincore): the reading end of that memory.
    "page-cache-read": (
        inject(
            "import ctypes, mmap, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "m = mmap.mmap(os.open('recipe.py', os.O_RDONLY), 0, access=mmap.ACCESS_COPY)\n"
            "vec = ctypes.create_string_buffer(64)\n"
            "where = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
            "if libc.mincore(where, ctypes.c_size_t(len(m)), vec) != 0:\n"
            "    raise PermissionError(os.strerror(ctypes.get_errno()))"
        ),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    # A crash dressed as memory exhaustion (it used to be labelled OOM from this text).
    "fake-memory-error": (
        inject("import sys\nprint('MemoryError: out of memory', file=sys.stderr)\nsys.exit(1)"),
        RunStatus.CRASH,
        "reporting it ran out of memory",
    ),
    "fork-bomb": (
        inject("import os\nwhile True:\n    os.fork()"),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    "multiprocessing": (
        inject("import multiprocessing\nmultiprocessing.Process(target=print).start()"),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    "exec": (
        inject("import subprocess\nsubprocess.run(['ls'])"),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    # Takes its whole budget, then trains on the batches it kept for 6 s more (issue 16: 12 s
    # of a 46 s run were counted as training).
    "replay-after-budget": (
        edit(
            "    for x, y in ctx.batches(BATCH_SIZE):\n",
            "    import itertools, time\n"
            "    kept = list(ctx.batches(BATCH_SIZE))\n"
            "    end = time.monotonic() + 6\n"
            "    replay = itertools.cycle(kept)\n"
            "    for x, y in itertools.takewhile(lambda _: time.monotonic() < end, replay):\n",
        ),
        RunStatus.CRASH,
        "went on training after its budget",
    ),
    # A user namespace would give the experiment every capability inside it (issue 16).
    "unshare": (
        inject(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "if libc.unshare(0x10000000) != 0:\n"
            "    raise PermissionError(os.strerror(ctypes.get_errno()))"
        ),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    # Reading another process's limits (setting them killed a process outside in issue 16).
    "prlimit-another-process": (
        inject("import os, resource\nresource.prlimit(os.getppid(), resource.RLIMIT_CORE)"),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    # SysV IPC and the keyrings: state outside the run's limits that outlives it, and a
    # channel between runs (a red team left a 64 MiB segment and read another process's key).
    "sysv-shared-memory": (
        inject(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "if libc.shmget(0, 1 << 26, 0o1000 | 0o600) < 0:\n"
            "    raise PermissionError(os.strerror(ctypes.get_errno()))"
        ),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    # A pathname Unix socket reaches any local service as the trainer's user.
    "unix-socket": (
        inject("import socket\nsocket.socket(socket.AF_UNIX)"),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    "disk-fill": (
        inject(
            "chunk = bytes(2**24)\ni = 0\nwhile True:\n"
            "    open(f'fill{i}', 'wb').write(chunk)\n    i += 1"
        ),
        RunStatus.CRASH,
        "disk quota exceeded",
    ),
    # Files deleted while held open take disk space no directory listing shows.
    "disk-fill-hidden": (
        inject(
            "import os\nchunk = bytes(2**24)\nheld = []\nwhile True:\n"
            "    f = open('hidden', 'wb')\n    os.unlink('hidden')\n"
            "    f.write(chunk)\n    f.flush()\n    held.append(f)"
        ),
        RunStatus.CRASH,
        "disk quota exceeded",
    ),
    "many-files": (
        inject("i = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1"),
        RunStatus.CRASH,
        "disk quota exceeded",
    ),
    "deep-dirs": (
        inject("import os\nwhile True:\n    os.mkdir('d')\n    os.chdir('d')"),
        RunStatus.CRASH,
        "nested deeper than 32 directories",
    ),
    "big-file": (
        inject(
            "chunk = bytes(2**24)\n"
            "with open('big', 'wb') as f:\n    while True:\n        f.write(chunk)"
        ),
        RunStatus.CRASH,
        "file size limit exceeded",
    ),
    # Output goes through a pipe; past the file-size limit only its end is kept, so endless
    # output costs the experiment its own time and the trainer no disk.
    "log-spam": (
        inject("line = 'x' * 65536\nwhile True:\n    print(line)"),
        RunStatus.TIMEOUT,
        "wall-clock limit",
    ),
    "udp": (
        inject(
            "import socket\n"
            "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9))"
        ),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    # Memory in a file with no path: outside the address-space limit.
    "memfd": (
        inject("import os\nos.write(os.memfd_create('hog'), bytes(2**20))"),
        RunStatus.CRASH,
        "Operation not permitted",
    ),
    "write-outside": (
        inject("open('/tmp/swarm-escape.txt', 'w').write('x')"),
        RunStatus.CRASH,
        "Permission denied",
    ),
    "read-val-split": (
        inject(
            "import sysconfig\nopen(sysconfig.get_paths()['stdlib'] + '/xmlrpc/client.py').read()"
        ),
        RunStatus.CRASH,
        "Permission denied",
    ),
    "huge-info": (
        inject(
            "import os\nimport training.protocol as p\n"
            "os.write(ctx._req, b'I' + p.INFO.pack(2**31))"
        ),
        RunStatus.CRASH,
        "protocol violation",
    ),
    "closed-pipe": (
        inject(
            "import os, time\nimport training.protocol as p\nos.close(ctx._resp)\n"
            "p.write_all(ctx._req, b'B' + p.BATCH_ASK.pack(16, 16))\ntime.sleep(1)"
        ),
        RunStatus.CRASH,
        "Bad file descriptor",
    ),
    "nan-logits": (
        edit(
            "    return model\n",
            "    model.head.weight.data.fill_(float('nan'))\n    return model\n",
        ),
        RunStatus.CRASH,
        "non-finite logits",
    ),
    # Rewires the harness through the stack: it then hands over no model to evaluate.
    "harness-rewired": (
        inject(
            "import inspect\nfor info in inspect.stack():\n"
            "    if '_hand_over' in info.frame.f_globals:\n"
            "        info.frame.f_globals['_hand_over'] = lambda *args: None"
        ),
        RunStatus.CRASH,
        "ended without saving its model",
    ),
}
if platform.machine() == "x86_64":  # int 0x80 reaches the i386 syscall table
    ATTACKS["fork-i386"] = (inject(FORK_I386), RunStatus.CRASH, "Operation not permitted")
    ATTACKS["keyring"] = (  # add_key into the user's keyring (248 is x86_64's number)
        inject(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "if libc.syscall(248, b'user', b'run', b'secret', 6, -4) < 0:\n"
            "    raise PermissionError(os.strerror(ctypes.get_errno()))"
        ),
        RunStatus.CRASH,
        "Operation not permitted",
    )

# Cheats that must leave the metric exactly the baseline's (OK) or break the run (CRASH):
# tampering inside the experiment process changes nothing the runner computes.
CHEATS: dict[str, tuple[str, RunStatus]] = {
    "monkeypatch-evaluator": (
        inject("import training.evaluator as e\ne.Evaluation.finish = lambda self: 0.0"),
        RunStatus.OK,
    ),
    "monkeypatch-protocol": (
        inject("import training.protocol as p\np.VOCAB = 2"),
        RunStatus.CRASH,
    ),
    "fake-metric": (inject("print('val_bpb: 0.0001')"), RunStatus.OK),
    "frame-inspection": (
        inject("import sys\nf = sys._getframe(1)\nf.f_globals['EXIT_RECIPE_ERROR'] = 0"),
        RunStatus.OK,
    ),
    # The evaluator's state is nowhere in the experiment's memory.
    "gc-search": (
        inject(
            "import gc\n"
            "assert not [o for o in gc.get_objects() if type(o).__name__ == 'Evaluation']"
        ),
        RunStatus.OK,
    ),
}
