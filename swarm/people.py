"""What people do at the edges: review held ideas, approve or reject them, and look at, export
or revert the champion. Reads go through the ledger (running or stopped); changes go to the
running ladder, which records them as events like any other decision."""

from __future__ import annotations

import difflib
import getpass
import json
from pathlib import Path

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from bus.nats_bus import connect
from bus.subjects import LADDER_CONTROL_SUBJECT
from bus.untrusted import for_terminal
from swarm.config import SwarmConfig
from swarm.errors import SwarmError
from swarm.ledger_process import SwarmNotRunning
from swarm.output import FORMATS
from swarm.sql_client import query
from swarm.workspace import Workspace

HELD_SQL = """
SELECT d.idea_id, i.author, d.champion_version, i.hypothesis, d.created_at AS held_since
FROM decisions d JOIN ideas i USING (idea_id)
WHERE d.verdict = 'HELD' AND NOT EXISTS (
    SELECT 1 FROM decisions p WHERE p.idea_id = d.idea_id AND p.decided_by <> 'ladder')
  AND NOT EXISTS (SELECT 1 FROM champions c WHERE c.idea_id = d.idea_id)
ORDER BY d.created_at"""


class ControlRefused(ValueError):
    pass


async def review(config: SwarmConfig, workspace: Workspace) -> str:
    answer = await query(workspace, config, HELD_SQL)
    if answer.table.num_rows == 0:
        return "no ideas are waiting for approval"
    return FORMATS["table"](answer.table)


async def control(config: SwarmConfig, workspace: Workspace, **request: object) -> str:
    """Send one request to the running ladder; its answer, or ControlRefused with its reason."""
    settings = workspace.read_bus_settings()
    if settings is None or not workspace.is_running():
        raise SwarmNotRunning(
            f"no swarm running in {workspace.root}: start it to change the ladder"
        )
    request.setdefault("who", getpass.getuser())
    nc = await connect(settings, "swarm-control", config.bus.connect_timeout_s)
    try:
        reply = await nc.request(LADDER_CONTROL_SUBJECT, json.dumps(request).encode(), timeout=15)
    except (NoRespondersError, NatsTimeout, TimeoutError):
        raise SwarmNotRunning("the ladder is not answering (is it restarting?)") from None
    finally:
        await nc.close()
    answer = json.loads(reply.data)
    if not answer.get("ok"):
        raise ControlRefused(answer.get("error", "refused"))
    return "done: " + ", ".join(answer.get("done", []))


async def champion_source(config: SwarmConfig, workspace: Workspace, version: int | None) -> str:
    return (await champion(config, workspace, version))[1]


async def champion(
    config: SwarmConfig, workspace: Workspace, version: int | None
) -> tuple[int, str]:
    """A champion version (the latest when None) and its recipe."""
    where = f"WHERE version = {int(version)}" if version is not None else ""
    sql = f"SELECT version, source FROM champions {where} ORDER BY version DESC LIMIT 1"
    rows = (await query(workspace, config, sql)).table.to_pylist()
    if not rows:
        what = f"champion v{version}" if version is not None else "any champion"
        raise ControlRefused(f"the ledger has no {what} yet")
    return int(rows[0]["version"]), str(rows[0]["source"])


async def champion_history(config: SwarmConfig, workspace: Workspace) -> str:
    sql = (
        "SELECT version, parent_version, kind, idea_id, author, hypothesis, reason, created_at "
        "FROM lineage ORDER BY version"
    )
    return FORMATS["table"]((await query(workspace, config, sql)).table)


async def champion_diff(
    config: SwarmConfig, workspace: Workspace, old: int | None, new: int | None
) -> str:
    new, newer = await champion(config, workspace, new)
    if old is None:
        old = max(1, new - 1)
    older = await champion_source(config, workspace, old)
    text = "".join(
        difflib.unified_diff(older.splitlines(True), newer.splitlines(True), f"v{old}", f"v{new}")
    )
    # A researcher wrote these lines: escapes are shown, never sent to the terminal.
    return for_terminal(text) if text else f"v{old} and v{new} are the same recipe"


async def champion_export(
    config: SwarmConfig, workspace: Workspace, version: int | None, out: Path | None
) -> str:
    """The champion's recipe in `out` (default: champion-v<N>.py here)."""
    version, source = await champion(config, workspace, version)
    out = out or Path(f"champion-v{version}.py")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # `--out a/recipe.py`, as the README has it
        out.write_text(source)
    except OSError as exc:
        raise SwarmError(f"--out {out}: {exc.strerror}") from None
    return f"wrote champion v{version} to {out}"
