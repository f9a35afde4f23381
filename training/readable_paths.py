"""What an experiment may read: its Python, its packages and shared libraries, no corpus copy.

Landlock grants a folder with everything under it and has no exceptions, so no folder that holds
a copy of a corpus module (corpus_modules.py) is ever granted whole:
- the standard library (and any folder Python imports from that holds a corpus module, such as
  /usr/lib/python3.X of a system Python) is granted entry by entry, less the corpus modules and
  their compiled forms in `__pycache__`;
- site-packages is granted whole: the corpus modules are ones no well-known package vendors;
- shared libraries are granted file by file, never their folders: /usr/lib, /usr/local/lib and
  /lib64 hold other Pythons (the system's, a container's, one bundled with a cloud SDK), and
  granting them whole left those copies readable (issue 16: an n-gram built from them scored
  far better than any honest run). The files are every library the dynamic loader may load
  (those mapped now, those in its cache, those in its default folders and in the Python
  install's `lib`), so CUDA's driver loads as before; its device files are the harness's to
  grant.
tests/test_corpus_copies.py finds every copy of the corpus on the machine and checks, from
inside a real sandboxed experiment, that none is readable.
"""

from __future__ import annotations

import os
import platform
import re
import site
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from training.corpus_modules import corpus_module

# The dynamic loader's own folders (glibc's default search path, with their multiarch subfolder
# added below), the folders LD_LIBRARY_PATH names (passed to experiments: a GPU machine's driver
# is often found only through it) and its cache.
LOADER_FOLDERS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")
LOADER_CACHE = Path("/etc/ld.so.cache")
# Files besides Python and libraries; none holds Python sources. Only what a run reads: glibc
# counts CPUs from the four files under /sys/devices/system/cpu, torch's cpuinfo reads
# /proc/cpuinfo (traced with strace, 2026-11-28). Whatever other processes can change is a
# channel between evaluation processes, or between runs on two trainers, so none of it is
# granted (red teams, docs/reliability.md): /proc/stat (its `processes` line counts every thread
# the machine starts), /proc/self (its `net` folder is the whole network namespace: every
# socket's count, path and address; 1,200 bit/s between confined processes through
# `net/sockstat`), /proc/meminfo, and the CPUs' idle-state counters
# (tests/test_machine_counters.py).
SYSTEM_PATHS = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/usr/lib/locale",
    "/proc/cpuinfo",
    "/sys/devices/system/cpu/online",
    "/sys/devices/system/cpu/possible",
    "/sys/devices/system/cpu/present",
    "/sys/devices/system/cpu/kernel_max",
    "/dev/urandom",
)
SITE_FOLDERS = {"site-packages", "dist-packages"}  # granted as site folders or not at all
SHARED = re.compile(r"\.so(\.[0-9]+)*$")  # a shared library's name: libx.so, libx.so.1.2
# What CUDA reads besides its libraries and its device files (granted one by one, read-write, in
# `device_paths`; never all of /dev, which holds the disks): the driver's parameters and the
# GPUs' PCI topology. None holds Python sources, credentials or a corpus. /proc/self and
# /proc/meminfo were granted to every run when CUDA was shown to start in the sandbox (H100 and
# H200, 2026-11-27); not yet run on a GPU without them, they stay granted on CUDA only, with the
# channels they open (docs/reliability.md).
CUDA_READ_PATHS = (
    "/proc/driver/nvidia",
    "/proc/driver/nvidia-uvm",
    "/sys/bus/pci",
    "/sys/devices",
    "/proc/self",
    "/proc/meminfo",
)


def python_read_paths(extra: Iterable[Path] = ()) -> list[Path]:
    """Everything a Python + torch process needs to read, and no copy of the corpus."""
    libraries = shared_libraries(_loader_folders(), LOADER_CACHE, Path("/proc/self/maps"))
    return [*python_install(), *libraries, *map(Path, SYSTEM_PATHS), *extra]


def device_paths(device: str) -> tuple[list[Path], list[Path]]:
    """What an experiment on `device` must read, and write, besides its Python and scratch:
    nothing on the CPU; on CUDA the paths above, its device files read-write (/dev/nvidiactl,
    /dev/nvidia-uvm, /dev/nvidiaN: it opens them so), and its own threads' files in /proc: the
    driver names the threads it starts (`/proc/self/task/<tid>/comm`) and fails to start when it
    cannot (error 304, seen on an H100). Landlock resolves `/proc/self` when the rule is made, so
    the grant covers the process that confines itself, not its children."""
    if not device.startswith("cuda"):
        return [], []
    own_threads = Path("/proc/self/task")
    return [Path(p) for p in CUDA_READ_PATHS], [*sorted(Path("/dev").glob("nvidia*")), own_threads]


def python_install() -> list[Path]:
    """The interpreter, its standard library less the corpus modules, its site folders."""
    paths = sysconfig.get_paths()
    sites = {Path(paths["purelib"]), Path(paths["platlib"]), *map(Path, site.getsitepackages())}
    grants = [Path(sys.executable)]
    for stdlib in dict.fromkeys((Path(paths["stdlib"]), Path(paths["platstdlib"]))):
        if stdlib not in sites:
            grants += without_corpus(stdlib)
    for folder in sorted(sites):  # a system Python's site folders may hold a corpus module too
        grants += without_corpus(folder)
    return grants


def without_corpus(folder: Path) -> list[Path]:
    """`folder` whole if it holds no corpus module; else each of its entries but those, and
    `__pycache__` file by file. Site folders inside (a Python's own site-packages) are left
    out: the ones on the path are granted on their own."""
    entries = _entries(folder)
    cache = _entries(folder / "__pycache__")
    if not any(corpus_module(e.name) for e in [*entries, *cache]):
        return [folder]
    grants = []
    for entry in entries:
        if entry.name == "__pycache__":
            grants += [Path(e.path) for e in cache if not corpus_module(e.name)]
        elif not corpus_module(entry.name) and entry.name not in SITE_FOLDERS:
            grants.append(Path(entry.path))
    return grants


def shared_libraries(folders: Iterable[Path], cache: Path, maps: Path) -> list[Path]:
    """Every shared library the dynamic loader may load, one file each: those mapped now, those
    its cache lists, those in its default folders. Granting a symlink grants its target."""
    found = [*_mapped_files(maps), *_cached_libraries(cache)]
    for folder in folders:
        found += [e.path for e in _entries(folder) if SHARED.search(e.name) and not e.is_dir()]
    # One name per file where folders are links (/lib -> usr/lib): each name is a Landlock rule.
    # (Strings, not Paths: this runs before every experiment and pathlib is most of its time.)
    real: dict[str, str] = {}
    libraries = set()
    for path in found:
        parent, name = os.path.split(path)
        if not SHARED.search(name):
            continue
        if parent not in real:
            real[parent] = os.path.realpath(parent)
        library = os.path.join(real[parent], name)
        # A link named like a library grants what it points to: only if that is one too (a
        # red team linked `libturtle.so` to a corpus module in a folder on LD_LIBRARY_PATH).
        if os.path.islink(library) and not SHARED.search(os.path.realpath(library)):
            continue
        libraries.add(library)
    return [Path(p) for p in sorted(libraries)]


def _loader_folders() -> list[Path]:
    """The loader's default folders, the interpreter's own `lib` (conda's and pyenv's libraries
    are found there through the binaries' RPATH, MKL's loaded lazily) and LD_LIBRARY_PATH's."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    folders = [Path(f) for f in LOADER_FOLDERS] + [Path(f) / multiarch for f in LOADER_FOLDERS]
    folders += [Path(sys.base_prefix) / "lib", Path(sys.prefix) / "lib"]
    # absolute entries only: a relative one names a folder under whatever the trainer's is
    folders += [Path(f) for f in os.environ.get("LD_LIBRARY_PATH", "").split(":") if f[:1] == "/"]
    return list(dict.fromkeys(f.resolve() for f in folders))


def _mapped_files(maps: Path) -> list[str]:
    """Paths of the files mapped into this process (its own libraries, torch's)."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return []
    fields = (line.split(maxsplit=5) for line in lines)
    return [f[5] for f in fields if len(f) == 6 and f[5].startswith("/")]


def _cached_libraries(cache: Path) -> list[str]:
    """The library paths in the loader's cache: its strings that are absolute paths (the keys
    are bare names), whatever the cache format's version."""
    try:
        data = cache.read_bytes()
    except OSError:
        return []
    strings = (s for s in data.split(b"\0") if s.startswith(b"/") and b".so" in s)
    return [s.decode() for s in strings if s.isascii() and s.decode().isprintable()]


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return []
