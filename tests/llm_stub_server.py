"""Local HTTP stubs of the Anthropic Messages API and the OpenAI chat completions API.

A real HTTP server on 127.0.0.1 (a free port) in a daemon thread, so the real SDKs, and other
processes, talk to it over HTTP. The paths the SDKs request, given `base_url`:

- anthropic: `AsyncAnthropic(base_url=stub.url)` posts `/v1/messages` (the SDK adds `/v1`; a
  base_url that already ends in /v1 would post /v1/v1/messages, which gets a 404). The key
  arrives as `authorization: Bearer <key>` (SDK 2.x), with `anthropic-version`.
- openai: `AsyncOpenAI(base_url=stub.openai_url)`, i.e. `<url>/v1`, posts
  `/v1/chat/completions` (the SDK appends the path to base_url as given).

What it answers is scripted: `respond(api, request_json, headers) -> Reply`, where api is
"anthropic" or "openai" and headers have lower-case names. A Reply with an error status gets the
API's error body, with the Reply's headers (e.g. retry-after). Left to itself the usage simulates
prompt caching: Anthropic caches a system prompt marked cache_control (the first request writes
len(system) // 4 tokens, later ones read them); OpenAI caches every repeated system prompt.
Every request is recorded in `.requests`.

    with StubLlmServer(ScriptedReplies(Reply(status=429, headers={"retry-after": "0"}))) as stub:
        ...  # AsyncAnthropic(base_url=stub.url, ...); stub.requests[0].headers["authorization"]

`python -m tests.llm_stub_server` runs one by itself and prints its URL.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATHS = {"/v1/messages": "anthropic", "/v1/chat/completions": "openai"}
IDLE_CONNECTION_TIMEOUT_S = 30.0  # a keep-alive connection nobody uses is dropped after this
CHARS_PER_TOKEN = 4

ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
OPENAI_ERROR_TYPES = {  # status: (type, code)
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", None),
}


@dataclass(frozen=True)
class Reply:
    text: str = "ok"  # the answer, or the error message when status is not 200
    status: int = 200
    usage: Mapping[str, Any] | None = None  # the API's usage object verbatim; None: simulated
    send_usage: bool = True  # False: no usage field at all, as some local servers do
    headers: Mapping[str, str] = field(default_factory=dict)
    error_type: str | None = None  # default: the API's usual type for the status
    model: str | None = None  # default: the model the request named
    stop_reason: str | None = None  # default: end_turn / stop
    delay_s: float = 0.0  # wait this long before answering (ends early when the stub closes)


@dataclass(frozen=True)
class RecordedRequest:
    api: str  # "anthropic" | "openai" | "" (unknown path)
    path: str
    headers: dict[str, str]  # names in lower case
    json: Any


Respond = Callable[[str, Any, dict[str, str]], Reply]


class ScriptedReplies:
    """A `respond` that serves the given replies in order, then `fallback` for ever."""

    def __init__(self, *replies: Reply, fallback: Reply | None = None) -> None:
        self._queue = deque(replies)
        self._fallback = fallback or Reply()
        self._lock = threading.Lock()

    def __call__(self, api: str, request_json: Any, headers: dict[str, str]) -> Reply:
        with self._lock:
            return self._queue.popleft() if self._queue else self._fallback

    @property
    def left(self) -> int:
        with self._lock:
            return len(self._queue)


class StubLlmServer:
    """Serves both APIs until `close()` (idempotent), which also ends open connections."""

    def __init__(self, respond: Respond | None = None) -> None:
        self.respond: Respond = respond or ScriptedReplies()
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._cached: set[tuple[str, str, str]] = set()  # (api, model, system text)
        self._handlers: dict[socket.socket, threading.Thread] = {}  # open connections
        self._closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self.openai_url = f"{self.url}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._server.shutdown()
        self._thread.join()
        with self._lock:
            handlers = dict(self._handlers)
        for connection in handlers:  # ends idle keep-alive connections, and delayed replies
            with contextlib.suppress(OSError):  # already gone
                connection.shutdown(socket.SHUT_RDWR)
        for handler in handlers.values():
            handler.join()
        self._server.server_close()

    def __enter__(self) -> StubLlmServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Called from handler threads.

    def _register(self, connection: socket.socket, handler: threading.Thread | None) -> None:
        with self._lock:
            if handler is None:
                self._handlers.pop(connection, None)
            else:
                self._handlers[connection] = handler

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _first_time(self, key: tuple[str, str, str]) -> bool:
        with self._lock:
            first = key not in self._cached
            self._cached.add(key)
            return first

    def _answer(
        self, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        api = PATHS.get(path, "")
        try:
            request = json.loads(body or b"null")
        except ValueError:
            request = None
        self._record(RecordedRequest(api, path, headers, request))
        if not api:
            return 404, {}, {"error": {"type": "not_found_error", "message": f"no route {path}"}}
        if not isinstance(request, dict):
            return _error(api, Reply("request body is not a JSON object", status=400))
        try:
            reply = self.respond(api, request, headers)
        except Exception as exc:  # a broken script is the test's bug: say so in the response
            return _error(api, Reply(f"stub respond() raised {exc!r}", status=500))
        if reply.delay_s and self._closing.wait(reply.delay_s):
            return _error(api, Reply("stub closing", status=503))
        if reply.status != 200:
            return _error(api, reply)
        if api == "anthropic":
            return 200, dict(reply.headers), self._anthropic_message(request, reply)
        return 200, dict(reply.headers), self._chat_completion(request, reply)

    def _anthropic_message(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        model = reply.model or str(request.get("model", ""))
        message: dict[str, Any] = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": reply.text}],
            "stop_reason": reply.stop_reason or "end_turn",
            "stop_sequence": None,
        }
        if reply.send_usage:
            message["usage"] = reply.usage or self._anthropic_usage(request, model, reply)
        return message

    def _anthropic_usage(self, request: dict[str, Any], model: str, reply: Reply) -> dict[str, int]:
        system, marked = _anthropic_system(request.get("system"))
        uncached = _tokens(json.dumps(request.get("messages", [])))
        size = _tokens(system)
        write = read = 0
        if marked or "cache_control" in request:
            if self._first_time(("anthropic", model, system)):
                write = size
            else:
                read = size
        else:
            uncached += size
        return {
            "input_tokens": uncached,
            "output_tokens": max(1, _tokens(reply.text)),
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
        }

    def _chat_completion(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        model = reply.model or str(request.get("model", ""))
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text, "refusal": None},
                    "finish_reason": reply.stop_reason or "stop",
                    "logprobs": None,
                }
            ],
        }
        if reply.send_usage:
            completion["usage"] = reply.usage or self._openai_usage(request, model, reply)
        return completion

    def _openai_usage(self, request: dict[str, Any], model: str, reply: Reply) -> dict[str, Any]:
        messages = request.get("messages", [])
        system = "".join(
            str(m.get("content", "")) for m in messages if m.get("role") in ("system", "developer")
        )
        rest = [m for m in messages if m.get("role") not in ("system", "developer")]
        prompt = _tokens(system) + _tokens(json.dumps(rest))
        cached = 0 if self._first_time(("openai", model, system)) else _tokens(system)
        completion = max(1, _tokens(reply.text))
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }


class _Server(ThreadingHTTPServer):
    """One daemon thread per connection (never keeps a process alive), known to the stub so
    that close() can end and join them."""

    stub: StubLlmServer

    def process_request(self, request: Any, client_address: Any) -> None:
        handler = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        self.stub._register(request, handler)
        handler.start()

    def shutdown_request(self, request: Any) -> None:
        self.stub._register(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (it timed out) or a connection cut by close() is no news.
        if not self.stub._closing.is_set() and not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect
    timeout = IDLE_CONNECTION_TIMEOUT_S
    disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms delayed-ACK wait
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        status, extra_headers, payload = self.server.stub._answer(self.path, headers, body)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        self.send_header("x-request-id", f"req_{uuid.uuid4().hex[:24]}")
        for name, value in extra_headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the requests are recorded instead


def _error(api: str, reply: Reply) -> tuple[int, dict[str, str], Any]:
    if api == "anthropic":
        kind = reply.error_type or ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
        body: Any = {"type": "error", "error": {"type": kind, "message": reply.text}}
    else:
        default_kind, code = OPENAI_ERROR_TYPES.get(reply.status, ("server_error", None))
        kind = reply.error_type or default_kind
        body = {"error": {"message": reply.text, "type": kind, "param": None, "code": code}}
    return reply.status, dict(reply.headers), body


def _anthropic_system(system: Any) -> tuple[str, bool]:
    """The system prompt's text, and whether a block of it is marked for caching."""
    if isinstance(system, str):
        return system, False
    if not isinstance(system, list):
        return "", False
    blocks = [b for b in system if isinstance(b, dict)]
    text = "".join(str(b.get("text", "")) for b in blocks)
    return text, any("cache_control" in b for b in blocks)


def _tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN


def main() -> None:
    with StubLlmServer() as stub:
        print(stub.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
