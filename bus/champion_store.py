"""Champion versions of the editable file, kept in a JetStream key-value bucket.

The ladder writes version N (`v<N>`) before it announces it, and `current` after; trainers and
researchers on any machine read a version by number and cache it (a version never changes once
written). The whole history is also in the ledger's `champions` table (ChampionChange.source).
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from bus.nats_bus import key_value_bucket

BUCKET = "SWARM_CHAMPIONS"


class ChampionMissing(LookupError):
    pass


async def champion_bucket(js: JetStreamContext) -> KeyValue:
    return await key_value_bucket(js, BUCKET)


class ChampionStore:
    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self._kv: KeyValue | None = None
        self._cache: dict[int, str] = {}

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await champion_bucket(self.js)
        return self._kv

    async def put(self, version: int, source: str) -> None:
        kv = await self._bucket()
        await kv.put(f"v{version}", source.encode())
        self._cache[version] = source

    async def set_current(self, version: int) -> None:
        await (await self._bucket()).put("current", str(version).encode())

    async def current(self) -> int:
        """The newest announced version; 0 before the ladder wrote the first."""
        try:
            entry = await (await self._bucket()).get("current")
        except KeyNotFoundError:
            return 0
        return int((entry.value or b"0").decode())

    async def get(self, version: int) -> str:
        if version not in self._cache:
            try:
                entry = await (await self._bucket()).get(f"v{version}")
            except KeyNotFoundError:
                raise ChampionMissing(f"champion v{version} is not in the store") from None
            try:
                self._cache[version] = (entry.value or b"").decode()
            except UnicodeDecodeError:  # anyone on the bus can write the bucket: not our data
                raise ChampionMissing(f"champion v{version} in the store is not text") from None
        return self._cache[version]
