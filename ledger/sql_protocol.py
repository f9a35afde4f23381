"""The SQL request/reply protocol on `swarm.sql`, shared by the ledger and its clients.

Request: JSON `{"sql": str, "max_rows": int | null}`.
Reply: header `Swarm-Status: ok` with an Arrow IPC stream as the body (types survive, so
`--out x.parquet` keeps timestamps as timestamps), `Swarm-Truncated: 1` when rows were cut;
or `Swarm-Status: error` with the reason as UTF-8 text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

STATUS = "Swarm-Status"
TRUNCATED = "Swarm-Truncated"


class SqlError(RuntimeError):
    """The ledger refused or failed the query; the message is its reason."""


@dataclass(frozen=True, slots=True)
class SqlRequest:
    sql: str
    max_rows: int | None = None

    def encode(self) -> bytes:
        return json.dumps({"sql": self.sql, "max_rows": self.max_rows}).encode()

    @staticmethod
    def decode(raw: bytes) -> SqlRequest:
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SqlError(f"malformed SQL request: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("sql"), str):
            raise SqlError('malformed SQL request: expected {"sql": "..."}')
        max_rows = data.get("max_rows")
        if max_rows is not None and (not isinstance(max_rows, int) or max_rows < 1):
            raise SqlError("malformed SQL request: max_rows must be a positive integer")
        return SqlRequest(data["sql"], max_rows)


def table_to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def ipc_to_table(raw: bytes) -> pa.Table:
    return pa.ipc.open_stream(raw).read_all()


def ok_headers(truncated: bool) -> dict[str, str]:
    return {STATUS: "ok", TRUNCATED: "1" if truncated else "0"}


def error_headers() -> dict[str, str]:
    return {STATUS: "error"}
