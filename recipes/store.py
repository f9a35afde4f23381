"""Every recipe the swarm runs, held once by its content address in a JetStream bucket.

The ladder writes a RunSpec's recipe here before it puts the job on a queue; a trainer reads the
recipe the RunSpec names (`RunSpec.recipe_sha`) and runs exactly that file, applying no patch.
The key is the recipe's SHA-256 (identity.py) and every read is checked against it, so a value
that is not the recipe its key names (a bucket written by hand, a disk fault) is refused with the
reason instead of run. Only the ladder may write the bucket (bus/roles.py); the supervisor makes
it at start, so no other role needs to create streams.

Why a key-value bucket and not the event stream: a recipe is the same bytes for every seed and
tier it runs at, and an idea's several RunSpecs (and every baseline of a champion) name it; the
stream would carry it once per RunSpec. Why not the ledger: trainers must keep running while the
ledger restarts. The bucket lives in the bus's own store, next to the streams.
"""

from __future__ import annotations

from collections import OrderedDict

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from bus.nats_bus import key_value_bucket
from recipes.identity import is_sha, recipe_sha

BUCKET = "SWARM_RECIPES"
CACHE_RECIPES = 256  # recipes a process keeps in memory: an idea's runs name one recipe


class RecipeMissing(LookupError):
    """A recipe the store cannot give: not there, not text, or not the recipe its key names."""


async def recipe_bucket(js: JetStreamContext) -> KeyValue:
    return await key_value_bucket(js, BUCKET)


class RecipeStore:
    def __init__(self, js: JetStreamContext, cache: int = CACHE_RECIPES) -> None:
        self.js = js
        self._kv: KeyValue | None = None
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._size = cache

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await recipe_bucket(self.js)
        return self._kv

    async def put(self, source: str) -> str:
        """Store a recipe (once: a recipe this process wrote or read is not written again);
        its content address."""
        sha = recipe_sha(source)
        if sha not in self._cache:
            await (await self._bucket()).put(sha, source.encode())
        self._keep(sha, source)
        return sha

    async def get(self, sha: str) -> str:
        """The recipe whose content address is `sha`, checked against it."""
        cached = self._cache.get(sha)
        if cached is not None:
            self._cache.move_to_end(sha)
            return cached
        if not is_sha(sha):
            raise RecipeMissing(f"{sha[:80]!r} is not a recipe's address (64 hex digits)")
        try:
            entry = await (await self._bucket()).get(sha)
        except KeyNotFoundError:
            raise RecipeMissing(f"recipe {sha[:12]} is not in the store") from None
        try:
            source = (entry.value or b"").decode()
        except UnicodeDecodeError:
            raise RecipeMissing(f"recipe {sha[:12]} in the store is not text") from None
        if recipe_sha(source) != sha:
            raise RecipeMissing(f"the value at {sha[:12]} in the store is not the recipe it names")
        self._keep(sha, source)
        return source

    def _keep(self, sha: str, source: str) -> None:
        self._cache[sha] = source
        self._cache.move_to_end(sha)
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)
