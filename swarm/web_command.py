"""`swarm web`: serve the read-only web view (swarm/web/) of a swarm.

    swarm web                          this workspace: the running swarm, or its ledger file
    swarm web --port 8080
    swarm web --nats nats://hub:4222 --nats-user cli   a swarm elsewhere (password from
                                       SWARM_NATS_PASSWORD), as the bus's cli role

`swarm start` runs this as one of its processes (web.enabled). On loopback anyone on the machine
may read it, as they may run `swarm sql`; on any other address every request must carry the
bus credentials of the cli role (HTTP Basic), and without them it does not start.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import pyarrow as pa
import uvicorn
from nats.aio.client import Client

from bus.embedded_server import write_private
from bus.nats_bus import BusSettings, BusUnavailable, connect
from bus.roles import Role
from swarm.config import SwarmConfig
from swarm.errors import SwarmError
from swarm.event_loop import stop_on_signals
from swarm.ladder_process import target_info
from swarm.sql_client import connect_running
from swarm.web.app import WebOptions, make_app
from swarm.web.source import BusSource, FileSource
from swarm.workspace import Workspace


class LocalSource:
    """This workspace's swarm: over the bus while it runs (reconnecting after a restart), from
    the ledger file once it has stopped."""

    def __init__(self, workspace: Workspace, config: SwarmConfig) -> None:
        self.workspace, self.config = workspace, config
        self.file = FileSource(workspace, config)
        self.nc: Client | None = None
        self.lock = asyncio.Lock()

    @property
    def running(self) -> bool:
        return self.workspace.is_running()

    async def _bus(self) -> BusSource | None:
        if not self.workspace.is_running():
            return None
        async with self.lock:
            if self.nc is None or self.nc.is_closed:
                self.nc = await connect_running(self.workspace, self.config, "swarm-web")
                if self.nc is None:
                    return None
        return BusSource(self.nc, self.config.ledger.sql_timeout_s + 5)

    async def table(self, sql: str) -> pa.Table:
        bus = await self._bus()
        return await (bus or self.file).table(sql)

    async def queues(self) -> dict[int, tuple[int, int]]:
        bus = await self._bus()
        return await bus.queues() if bus else {}

    async def close(self) -> None:
        if self.nc is not None:
            await self.nc.close()


def listening_socket(host: str, wanted: int) -> socket.socket:
    """A socket bound on `host`: to `wanted` if it is free, else (or for 0) to a free port the
    system gives. Bound here and handed to the server, so the port printed is the one served."""
    for port in (wanted, 0) if wanted else (0,):
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            continue
        return sock
    raise SwarmError(f"web.host {host!r}: no port can be bound there")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(
    config: SwarmConfig,
    workspace: Workspace,
    remote: BusSettings | None,
    host: str,
    port: int,
    of_start: bool = False,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until `stop` is set (or a signal). `remote`: a swarm elsewhere, over its bus.
    `of_start`: `swarm start`'s own, which says where it listens (run/web.url), and listens
    there again when restarted."""
    source: Any
    if remote is not None:
        try:
            nc = await connect(remote, "swarm-web", config.bus.connect_timeout_s)
        except BusUnavailable as exc:
            raise SwarmError(f"swarm web: {exc}") from None
        source = BusSource(nc, config.ledger.sql_timeout_s + 5)
        credentials = (remote.user, remote.password) if remote.user else None
        whatif = None  # the seeds derive from the swarm's secret, which is not here
    else:
        source = LocalSource(workspace, config)
        local = workspace.read_bus_settings(Role.CLI)
        credentials = (local.user, local.password) if local and local.user else None
        whatif = _whatif(config, workspace) if workspace.seed_secret_file.exists() else None
    if is_loopback(host):
        credentials = None
    elif credentials is None or not credentials[1]:
        raise SwarmError(
            f"web.host {host!r} is not loopback: the web view there needs the bus's cli "
            "credentials (a swarm started here has them; else pass --nats-user and set "
            "SWARM_NATS_PASSWORD)"
        )
    options = WebOptions(
        title=f"research-swarm: {workspace.root if remote is None else remote.redacted_url()}",
        lower_is_better=target_info(config).lower_is_better,
        refresh_s=config.web.refresh_s,
        credentials=credentials,
        whatif=whatif,
        hosts=frozenset({"127.0.0.1", "localhost", "::1", host}),
    )
    server = uvicorn.Server(
        uvicorn.Config(
            make_app(source, options),
            log_level="warning",
            lifespan="off",
            access_log=False,
        )
    )
    stop = stop or asyncio.Event()
    stop_on_signals(stop, lambda _: None)
    if of_start and (earlier := _earlier_port(workspace)):
        port = earlier  # restarted: where the page people have open is asking
    sock = listening_socket(host, port)  # taken (another swarm's, say): another free one
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    print(f"swarm: web view {url}", flush=True)
    if of_start:
        write_private(workspace.web_url_file, url + "\n")
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    await asyncio.wait([task, asyncio.ensure_future(stop.wait())], return_when="FIRST_COMPLETED")
    server.should_exit = True
    await task
    if of_start:
        workspace.web_url_file.unlink(missing_ok=True)
    if isinstance(source, LocalSource):
        await source.close()
    elif isinstance(source, BusSource):
        await source.nc.close()


def _earlier_port(workspace: Workspace) -> int:
    """The port a web view of this swarm served before it was restarted (0: none)."""
    try:
        port = workspace.web_url_file.read_text().strip().rstrip("/").rpartition(":")[2]
    except OSError:
        return 0
    return int(port) if port.isdigit() else 0


def _whatif(config: SwarmConfig, workspace: Workspace) -> Any:
    from swarm import whatif_command as w

    one_at_a_time = asyncio.Lock()  # each replays the whole history: no pile of them

    async def answer(sweep: str) -> dict[str, Any]:
        async with one_at_a_time:
            made = await w.whatif(config, workspace, [], sweep)
        return {
            "fidelity": w.fidelity_line(made.fidelity),
            "settings": [
                {"label": s.label, "tiers": [list(r) for r in w.tier_rows(c)]}
                for s, c in made.results
            ],
        }

    return answer
