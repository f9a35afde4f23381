"""Child processes of `swarm start`: started, restarted when they die, stopped in order.

Each child runs in its own session (a Ctrl-C in the terminal reaches only the supervisor, which
then stops children in a sensible order) and gets SIGTERM if the supervisor dies, even by SIGKILL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from bus.embedded_server import die_with_parent

log = logging.getLogger(__name__)


class ManagedProcess:
    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        restart_delay_s: float = 1.0,
        withhold: tuple[str, ...] = (),
        grace_s: float = 10.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.env = env or {}  # variables to add (a trainer's CUDA_VISIBLE_DEVICES)
        self.grace_s = grace_s  # from SIGTERM to SIGKILL
        self.withhold = withhold  # environment variables it must not see (other roles' secrets)
        self.argv = argv
        self.log_path = log_path
        self.restart_delay_s = restart_delay_s
        self.restarts = 0
        self._process: asyncio.subprocess.Process | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            self._process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env={
                    **{k: v for k, v in os.environ.items() if k not in self.withhold},
                    **self.env,
                    "PYTHONUNBUFFERED": "1",
                },
            )
        log.info("started %s (pid %d)", self.name, self._process.pid)

    async def keep_alive(self) -> None:
        """Restart the process whenever it exits, until `stop()`; run as a task."""
        while not self._stopping:
            assert self._process is not None
            code = await self._process.wait()
            if self._stopping:
                return
            self.restarts += 1
            log.warning(
                "%s exited with code %s; restarting in %.1fs (see %s)",
                self.name,
                code,
                self.restart_delay_s,
                self.log_path,
            )
            await asyncio.sleep(self.restart_delay_s)
            if not self._stopping:
                await self.start()

    async def stop(self, grace_s: float | None = None) -> None:
        grace_s = self.grace_s if grace_s is None else grace_s
        self._stopping = True
        process = self._process
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace_s)
        except TimeoutError:
            log.warning("%s did not stop within %.0fs; killing it", self.name, grace_s)
            process.kill()
            await process.wait()
