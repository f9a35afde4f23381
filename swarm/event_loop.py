"""Running a process's main coroutine: uvloop where available, one shutdown path on signals."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every POSIX platform
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def stop_on_signals(stop: asyncio.Event, on_signal: Callable[[int], None] | None = None) -> None:
    """SIGINT and SIGTERM set `stop`; the process then shuts down through its normal path."""
    loop = asyncio.get_running_loop()

    def handle(signum: int) -> None:
        if on_signal is not None:
            on_signal(signum)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, handle, signum)
