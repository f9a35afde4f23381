"""The SQL request/reply protocol on `swarm.sql`, shared by the ledger and its clients.

Request: JSON `{"sql": str, "max_rows": int | null}`, no other keys (a misspelt one is refused,
not ignored).
Reply: header `Swarm-Status: ok` with an Arrow IPC stream as the body (types survive, so
`--out x.parquet` keeps timestamps as timestamps), `Swarm-Truncated: 1` when rows were cut;
or `Swarm-Status: error` with the reason as UTF-8 text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
from nats.aio.client import Client
from nats.errors import MaxPayloadError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from bus.subjects import SQL_SUBJECT

STATUS = "Swarm-Status"
TRUNCATED = "Swarm-Truncated"


# An error reply quotes at most this much of a reason (DuckDB's messages echo the query's names,
# and a reply larger than a bus message could not be sent at all).
MAX_ERROR_CHARS = 2000
REQUEST_KEYS = frozenset({"sql", "max_rows"})


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
        if not raw:
            raise SqlError('malformed SQL request: empty body, expected {"sql": "..."}')
        try:
            data = json.loads(raw)
        except UnicodeDecodeError as exc:
            why = f"not UTF-8 ({exc.reason} at byte {exc.start})"
            raise SqlError(f"malformed SQL request: {why}") from None
        except json.JSONDecodeError as exc:
            raise SqlError(f"malformed SQL request: not JSON ({exc.msg} at {exc.pos})") from None
        except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting too deep
            raise SqlError(f"malformed SQL request: not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise SqlError(
                f'malformed SQL request: expected {{"sql": "..."}}, got {type(data).__name__}'
            )
        unknown = sorted(set(data) - REQUEST_KEYS)
        if unknown:
            shown = ", ".join(repr(key[:40]) for key in unknown[:5])
            raise SqlError(f"malformed SQL request: unknown keys {shown} (known: sql, max_rows)")
        if not isinstance(data.get("sql"), str):
            got = type(data["sql"]).__name__ if "sql" in data else "nothing"
            raise SqlError(f'malformed SQL request: "sql" must be a string, got {got}')
        max_rows = data.get("max_rows")
        if max_rows is not None and (type(max_rows) is not int or max_rows < 1):
            raise SqlError("malformed SQL request: max_rows must be a positive integer")
        return SqlRequest(data["sql"], max_rows)


class LedgerUnavailable(RuntimeError):
    """No ledger answered: the message says why."""


async def ask(
    nc: Client, sql: str, timeout_s: float, max_rows: int | None = None
) -> tuple[pa.Table, bool]:
    """One SQL request to the running ledger: the rows and whether they were cut. Raises
    SqlError with the ledger's reason, LedgerUnavailable when none answers."""
    body = SqlRequest(sql, max_rows).encode()
    try:
        reply = await nc.request(SQL_SUBJECT, body, timeout=timeout_s)
    except MaxPayloadError:
        raise SqlError(
            f"the request is {len(body)} bytes, larger than a bus message ({nc.max_payload} bytes)"
        ) from None
    except NoRespondersError:
        raise LedgerUnavailable("no ledger is answering on the bus (is it restarting?)") from None
    except (TimeoutError, NatsTimeout):
        raise LedgerUnavailable(f"the ledger did not answer within {timeout_s:g}s") from None
    headers = reply.headers or {}
    if headers.get(STATUS) != "ok":
        raise SqlError(reply.data.decode(errors="replace"))
    return ipc_to_table(reply.data), headers.get(TRUNCATED) == "1"


def error_text(reason: str) -> bytes:
    """An error reply's body: the reason, its middle cut out if it is long."""
    if len(reason) > MAX_ERROR_CHARS:
        half = MAX_ERROR_CHARS // 2
        reason = f"{reason[:half]}… [{len(reason) - 2 * half} chars] …{reason[-half:]}"
    return reason.encode(errors="backslashreplace")


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
