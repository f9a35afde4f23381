"""Connecting to NATS (embedded or external) and publishing events with their ids."""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from bus.codec import encode
from bus.messages import Message, RunSpec, event_key, new_id
from bus.subjects import (
    JOBS_STREAM,
    JOBS_SUBJECTS,
    event_subject,
    job_subject,
    trainer_consumer_name,
)

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class BusSettings:
    """How to reach the bus. Credentials are optional; TLS files switch TLS on."""

    url: str
    token: str = ""
    user: str = ""
    password: str = ""
    creds_file: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""

    @property
    def has_credentials(self) -> bool:
        return bool(self.token or self.user or self.creds_file)

    def redacted_url(self) -> str:
        """The URL(s) with any inline credentials removed, safe for logs."""
        return ",".join(_redacted(url.strip()) for url in self.url.split(","))

    def ssl_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca or self.tls_cert):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca or None)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key or None)
        return context


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url


class BusUnavailable(ConnectionError):
    pass


async def connect(
    settings: BusSettings, name: str, timeout_s: float = CONNECT_TIMEOUT_S, **options: Any
) -> Client:
    """Connect with credentials, failing after `timeout_s`; once up, reconnect forever."""

    errors: list[Exception] = []  # while connecting: the server's reason (e.g. bad credentials)

    async def on_error(exc: Exception) -> None:
        errors.append(exc)
        del errors[:-10]
        # A refusal by the server's permissions (bus/roles.py) is a bug or an attack: say so.
        refused = "permissions violation" in str(exc).lower()
        log.log(logging.ERROR if refused else logging.DEBUG, "%s: bus error: %s", name, exc)

    kwargs: dict[str, Any] = {
        "error_cb": on_error,
        # A comma-separated list: the servers of a cluster, tried in turn.
        "servers": [url.strip() for url in settings.url.split(",") if url.strip()],
        "name": name,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
    }
    if settings.token:
        kwargs["token"] = settings.token
    if settings.user:
        kwargs["user"] = settings.user
        kwargs["password"] = settings.password
    if settings.creds_file:
        kwargs["user_credentials"] = settings.creds_file
    try:
        context = settings.ssl_context()
    except (OSError, ssl.SSLError) as exc:  # a missing or unreadable certificate file
        files = ", ".join(f for f in (settings.tls_ca, settings.tls_cert, settings.tls_key) if f)
        raise BusUnavailable(f"cannot set up TLS for the bus from {files}: {exc}") from None
    if context is not None:
        kwargs["tls"] = context
    kwargs.update(options)
    try:
        return await asyncio.wait_for(nats.connect(**kwargs), timeout_s)
    except (TimeoutError, OSError, NatsError) as exc:
        # The server's own word (e.g. Authorization Violation) over the reset that follows it.
        said = [e for e in errors if not isinstance(e, OSError)]
        cause = said[0] if said else errors[-1] if errors else exc
        why = str(cause) or type(cause).__name__
        if not said and isinstance(cause, ConnectionResetError) and settings.has_credentials:
            why += " (the server closed the connection: are the credentials right?)"
        raise BusUnavailable(
            f"cannot reach the bus at {settings.redacted_url()} within {timeout_s:.0f}s: {why}"
        ) from None


async def publish_event(js: JetStreamContext, message: Message, timeout: float = 5.0) -> None:
    """Publish and wait for the stream's ack; the kind and event id become `Nats-Msg-Id`."""
    await js.publish(
        event_subject(message),
        encode(message),
        timeout=timeout,
        headers={"Nats-Msg-Id": event_key(message.KIND, message.event_id)},
    )


async def enqueue_run(js: JetStreamContext, spec: RunSpec, timeout: float = 5.0) -> None:
    """Record a RunSpec as an event, then put it on its tier's work queue (both keyed by run
    id, so a retried enqueue neither runs twice nor adds a row). Event first: a job whose event
    never went out ran into a result that names no RunSpec; an event without its job is put
    back by the ladder's next start."""
    await publish_event(js, spec, timeout)
    await enqueue_job(js, spec, timeout)


async def queued_run_ids(js: JetStreamContext) -> set[str]:
    """The run ids of every job on the work queue: waiting, or taken and not yet acknowledged
    (a work queue drops a job only when a trainer acknowledges it, after its result is out)."""
    ids: set[str] = set()
    state = (await js.stream_info(JOBS_STREAM)).state
    seq = state.first_seq
    while state.messages and seq <= state.last_seq:
        try:
            msg = await js.get_msg(JOBS_STREAM, seq, subject=JOBS_SUBJECTS, next=True)
        except NotFoundError:  # nothing at or after seq any more
            break
        ids.add((msg.headers or {}).get("Nats-Msg-Id", "").split(":")[0])  # see requeue_job
        seq = (msg.seq or seq) + 1
    return ids


async def queued_jobs(js: JetStreamContext, tier: int) -> int | None:
    """Jobs of `tier` on the work queue: waiting, or taken and not yet acknowledged; None
    before a trainer of that tier made its consumer (nothing takes them yet)."""
    try:
        info = await js.consumer_info(JOBS_STREAM, trainer_consumer_name(tier))
    except NotFoundError:
        return None
    return (info.num_pending or 0) + (info.num_ack_pending or 0)


async def enqueue_job(js: JetStreamContext, spec: RunSpec, timeout: float = 5.0) -> None:
    """The work-queue half of `enqueue_run`: the job trainers take, keyed by its run id."""
    await js.publish(
        job_subject(spec.tier), encode(spec), timeout=timeout, headers={"Nats-Msg-Id": spec.run_id}
    )


async def requeue_job(js: JetStreamContext, spec: RunSpec, timeout: float = 5.0) -> None:
    """The job of a run that is on no queue and has no result, again. Under another message id
    (`<run id>:again:<n>`): the server's duplicate window (two minutes) would drop one under the
    run id whose first copy it accepted and then lost."""
    again = f"{spec.run_id}:again:{new_id('')[1:]}"
    await js.publish(
        job_subject(spec.tier), encode(spec), timeout=timeout, headers={"Nats-Msg-Id": again}
    )


async def key_value_bucket(js: JetStreamContext, name: str) -> KeyValue:
    """A key-value bucket of one value per key, made if missing (by the supervisor, whose role
    alone may create streams; in tests, by whoever comes first)."""
    try:
        return await js.key_value(name)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=name, history=1)
