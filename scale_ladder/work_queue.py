"""What the ladder puts on the trainers' work queue, and when.

A job's recipe goes to the recipe store before the job (a trainer that takes it finds it there).
A capped tier's jobs wait here and go best first while its queue has room (dispatch.py); every
other tier's go at once. A job the bus lost goes back (service.py finds them at a start).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from nats.js import JetStreamContext

from bus.messages import RunSpec
from bus.nats_bus import enqueue_job, queued_jobs, requeue_job
from recipes.store import RecipeStore
from scale_ladder.admission import NotAdmitted
from scale_ladder.dispatch import Dispatch
from scale_ladder.ladder import Ladder

log = logging.getLogger(__name__)


class WorkQueue:
    """The ladder's state comes with each call: the service replaces its Ladder with the one its
    snapshot holds at start (a Ladder kept from construction named no champion then)."""

    def __init__(self, js: JetStreamContext, caps: Mapping[int, int]) -> None:
        self.js = js
        self.recipes = RecipeStore(js)
        self.dispatch = Dispatch(caps)  # tier -> max_concurrent

    def __contains__(self, run_id: object) -> bool:
        """The run's job waits here (a capped tier's)."""
        return run_id in self.dispatch

    def keep(self, spec: RunSpec) -> bool:
        """Keep the job back if its tier is capped; False: send it now."""
        return self.dispatch.park(spec)

    async def store_recipes(self, ladder: Ladder, specs: list[RunSpec]) -> None:
        """Put the recipes these RunSpecs name in the recipe store, each once: before their jobs,
        so a trainer that takes a job finds its recipe (recipes/store.py)."""
        recipes = {
            s.recipe_sha: ladder.recipe_of(s.champion_version, s.patch)
            for s in specs
            if s.recipe_sha
        }
        stored = await asyncio.gather(*(self.recipes.put(source) for source in recipes.values()))
        for named, sha in zip(recipes, stored, strict=True):
            if named != sha:  # a RunSpec this ladder did not make so: say so
                log.error("RunSpec recipe %s is not what its champion and patch make", named[:80])

    async def release(self, ladder: Ladder) -> None:
        """Send each capped tier's best waiting jobs while its queue has room (dispatch.py).
        One that fails to go out waits again, for the next act (a second at most)."""
        for tier in self.dispatch.tiers():
            try:
                queued = await queued_jobs(self.js, tier)
            except Exception as exc:  # the bus is down: the next act looks again
                log.warning("could not read tier %d's queue (%s)", tier, exc)
                continue
            if queued is None:  # no trainer of this tier yet: sent once one is there
                continue
            for parked in self.dispatch.release(ladder, tier, queued):
                send = requeue_job if parked.again else enqueue_job
                try:
                    await self.store_recipes(ladder, [parked.spec])
                    await send(self.js, parked.spec)
                except (NotAdmitted, KeyError) as exc:  # no recipe to make, now or ever
                    log.error("job %s not sent: %s", parked.spec.run_id, exc)
                except Exception as exc:  # the bus: it waits again
                    why = f"{type(exc).__name__}: {exc}"
                    log.warning("sending job %s failed (%s)", parked.spec.run_id, why)
                    self.dispatch.park(parked.spec, parked.again)

    async def put_back(self, ladder: Ladder, lost: list[RunSpec]) -> set[str]:
        """Jobs of runs with no result on no queue: again, under a new message id; a capped
        tier's wait their turn here (their run ids are returned). One whose recipe cannot be
        made is left, said so."""
        waiting: set[str] = set()
        for spec in lost:
            if self.dispatch.park(spec, again=True):
                waiting.add(spec.run_id)
                continue
            try:
                await self.store_recipes(ladder, [spec])
            except (NotAdmitted, KeyError) as exc:  # no recipe to make: the rest go on
                log.error("lost job %s not put back: %s", spec.run_id, exc)
                continue
            await requeue_job(self.js, spec)
        return waiting
