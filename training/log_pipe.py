"""An experiment's output reaches its log through a pipe the runner reads.

The experiment used to write to the log file itself (its stdout was the file), so it could seek
and truncate it: a red team rewrote the whole log, the `sandbox:` line included, into fake
`status: OK` lines. Now its stdout and stderr are the write end of a pipe; a thread of the
runner copies what arrives into a file the experiment has no handle on and no path to (it is
made outside the folder the experiment may write, and unlinked at once). What was printed stays
printed, in order.

The file keeps the first `cap` bytes; past that only the last LOG_KEEP_BYTES are kept (in
memory, written after a marker when the run ends), which is all anyone reads (`fd_tail`,
`keep_log`). A flood of output costs the experiment its own time, not the trainer's disk.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Iterator
from pathlib import Path

from training.process_outcome import LOG_KEEP_BYTES

READ_BYTES = 1 << 16
# How a line the runner writes into a log begins; the same text printed by the experiment is
# written FORGED_MARK, so the runner's notes are the only lines that begin so.
RUNNER_MARK = b"[swarm:"
FORGED_MARK = b"[swarm?:"
POLL_S = 0.1
# After the process ends, how long what is still in the pipe may take to drain: a command's
# descendant that left its process group may hold the write end open for good.
DRAIN_S = 2.0


def private_log(folder: Path, name: str) -> int:
    """A new log file in `folder` (which the experiment cannot write), unlinked at once: the
    runner's handle is the only way to it."""
    path = folder / f".{name}.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.unlink(path)
    return fd


class _Pump(threading.Thread):
    def __init__(self, read: int, log: int, cap: int) -> None:
        super().__init__(name="log-pump", daemon=True)
        self.read, self.log, self.cap = read, log, cap
        self.written = 0
        self.dropped = 0
        self.tail = bytearray()  # the last LOG_KEEP_BYTES past the cap
        self.held = b""  # the chunk's end that may begin RUNNER_MARK (see _unmark)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            ready, _, _ = select.select([self.read], [], [], POLL_S)
            if ready and not self._copy():
                return

    def _copy(self) -> bool:
        """Copy what the pipe holds; False at end of file (every writer has closed it)."""
        try:
            chunk = os.read(self.read, READ_BYTES)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self._keep(chunk)
        return True

    def drain_now(self) -> None:
        """Copy what the pipe holds at this moment, without waiting for more."""
        while True:
            try:
                chunk = os.read(self.read, READ_BYTES)
            except BlockingIOError:
                return
            if not chunk:
                return
            self._keep(chunk)

    def _keep(self, chunk: bytes) -> None:
        self._store(self._unmark(chunk))

    def _store(self, chunk: bytes) -> None:
        room = max(0, self.cap - self.written)
        if room:
            os.write(self.log, chunk[:room])
            self.written += min(room, len(chunk))
        rest = chunk[room:]
        if rest:
            self.dropped += len(rest)
            self.tail += rest
            del self.tail[: max(0, len(self.tail) - LOG_KEEP_BYTES)]

    def _unmark(self, chunk: bytes) -> bytes:
        """The experiment's text with every RUNNER_MARK defaced (a red team printed a fake
        runner note), including one split across reads: a chunk's end that could begin the
        mark waits for the next chunk."""
        text = (self.held + chunk).replace(RUNNER_MARK, FORGED_MARK)
        self.held = b""
        for size in range(min(len(RUNNER_MARK) - 1, len(text)), 0, -1):
            if RUNNER_MARK.startswith(text[-size:]):
                text, self.held = text[:-size], text[-size:]
                break
        return text

    def finish(self) -> None:
        self.join(DRAIN_S)
        self.stop.set()
        self.join()
        if self.held:  # the start of a mark that never came: the experiment's last bytes,
            # ended with a newline, so that what the next process of the run prints into the
            # same log cannot complete the mark (a red team's `[swa` + `rm: …`)
            self._store(self.held + b"\n")
            self.held = b""
        if self.dropped:
            shown = len(self.tail)
            note = (
                f"\n{RUNNER_MARK.decode()} {self.dropped - shown} bytes of output past the first "
                f"{self.cap} were not kept; the last {shown} follow]\n"
            )
            os.write(self.log, note.encode() + bytes(self.tail))


class OutputPipe:
    """The write end of a pipe for a child's stdout and stderr (`write`), copied into `log`.
    Call `handed_over` once the child holds it (so the pipe ends when the child does), and
    `close` when the child has ended: what it wrote is drained into the log, for at most DRAIN_S
    once the writers are gone or stuck."""

    def __init__(self, log: int, cap: int) -> None:
        read, self.write = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(read, False)
        self._pump = _Pump(read, log, cap)
        self._pump.start()
        self._open = True
        self._reading = True

    def handed_over(self) -> None:
        if self._open:
            self._open = False
            os.close(self.write)

    def cut(self) -> None:
        """Keep what the child has printed so far, and nothing it prints from now on: its
        later writes fail (the read end is closed)."""
        if self._reading:
            self._reading = False
            self._pump.stop.set()
            self._pump.join()
            self._pump.drain_now()
            self._pump.finish()  # only writes the note on output past the cap
            os.close(self._pump.read)

    def close(self) -> None:
        self.handed_over()
        if self._reading:
            self._reading = False
            self._pump.finish()
            os.close(self._pump.read)


@contextlib.contextmanager
def output_pipe(log: int, cap: int) -> Iterator[OutputPipe]:
    pipe = OutputPipe(log, cap)
    try:
        yield pipe
    finally:
        pipe.close()
