"""A fork server for experiments: torch is imported once, each experiment is a fork.

Importing torch costs ~2.5 s of CPU, which was most of the runner's overhead per experiment.
The zygote is a child of the runner that imports torch (and never runs a torch op or touches
CUDA, so forking it is safe), then waits on a socket. For each experiment the runner sends the
config and the experiment's pipe and log fds (SCM_RIGHTS); the zygote forks, and the fork puts
itself in its own session, applies the rlimits and the parent-death signal, confines itself
(Landlock, seccomp) and runs the recipe exactly as a freshly started process would. The zygote
reports each fork's pid and, when it ends, its exit status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from training.sandbox import Limits, die_with_parent, scrubbed_env, set_rlimits

# --- inside the zygote ------------------------------------------------------------------------


def serve(sock_fd: int) -> None:
    # The point: imported once, before any fork. torch._dynamo is what the first optimizer
    # pulls in lazily (~1.7 s); importing runs no torch op and starts no thread.
    import torch
    import torch._dynamo
    import torch.optim  # noqa: F401

    sock = socket.socket(fileno=sock_fd)
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.1)
        if ready:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
            if not message:
                return  # the runner is gone
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                sock.close()
                _become_experiment(request, fds)
            for fd in fds:
                os.close(fd)
            children.add(pid)
            sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                code = os.waitstatus_to_exitcode(status)
                sock.sendall(json.dumps({"exit": pid, "code": code}).encode() + b"\n")


def _become_experiment(request: dict[str, Any], fds: list[int]) -> None:
    from training import harness_child

    req, resp, log = fds
    code = 1
    try:
        os.setsid()
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        set_rlimits(Limits(**request["limits"]))
        os.environ.clear()
        os.environ.update(request["env"])
        config = {**request["config"], "req_fd": req, "resp_fd": resp}
        harness_child.run_experiment(config)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# --- inside the runner ------------------------------------------------------------------------


class ZygoteGone(RuntimeError):
    pass


class Zygote:
    """The runner's handle on its fork server; `spawn` returns a pid, `wait` its exit code."""

    def __init__(self, device: str) -> None:
        self.device = device
        ours, theirs = socket.socketpair()
        self._sock = ours
        self.process = subprocess.Popen(
            [sys.executable, "-m", "training.harness_child", "--zygote", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            env=scrubbed_env(None, {}, cpu=not device.startswith("cuda")),
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        theirs.close()
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}
        self._reader = threading.Thread(target=self._read_forever, daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None and self._reader.is_alive()

    def spawn(
        self, config: dict[str, Any], env: dict[str, str], limits: Limits, fds: tuple[int, int, int]
    ) -> int:
        request = {"config": config, "env": env, "limits": dataclasses.asdict(limits)}
        with self._lock:
            try:
                socket.send_fds(self._sock, [json.dumps(request).encode()], list(fds))
            except OSError as exc:
                raise ZygoteGone(str(exc)) from None
            with self._changed:
                if not self._changed.wait_for(lambda: self._pids or not self.alive, 30):
                    raise ZygoteGone("the zygote did not answer")
                if not self._pids:
                    raise ZygoteGone("the zygote exited")
                return self._pids.pop(0)

    def wait(self, pid: int, timeout: float) -> int:
        with self._changed:
            if not self._changed.wait_for(lambda: pid in self._exits or not self.alive, timeout):
                raise subprocess.TimeoutExpired(f"experiment {pid}", timeout)
            if pid not in self._exits:
                raise ZygoteGone("the zygote exited while an experiment ran")
            return self._exits.pop(pid)

    def _read_forever(self) -> None:
        try:
            for line in self._sock.makefile("rb"):
                message = json.loads(line)
                with self._changed:
                    if "pid" in message:
                        self._pids.append(message["pid"])
                    else:
                        self._exits[message["exit"]] = message["code"]
                    self._changed.notify_all()
        except OSError:  # the zygote died (a reset socket): the same as its end of the stream
            pass
        finally:  # whoever waits learns now that it is gone, not at their timeout
            with self._changed:
                self._changed.notify_all()

    def close(self) -> None:
        self._sock.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- starting an experiment -----------------------------------------------------------------


class Experiment:
    """The experiment process, started fresh or forked by the zygote: pid, wait, kill."""

    def __init__(self, pid: int, wait: Callable[[float], int]) -> None:
        self.pid = pid
        self._wait = wait
        self.returncode: int | None = None

    def wait(self, timeout: float) -> int:
        if self.returncode is None:
            self.returncode = self._wait(timeout)
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, ZygoteGone):
            self.wait(10)


_zygotes: dict[str, Zygote] = {}
_zygote_lock = threading.Lock()


def start_experiment(
    config: dict[str, Any], env: dict[str, str], limits: Limits, fds: tuple[int, int, int]
) -> Experiment:
    """Fork from the device's zygote (torch already imported); start afresh if it fails."""
    device = config["device"]
    with _zygote_lock:
        zygote = _zygotes.get(device)
        if zygote is None or not zygote.alive:
            zygote = _zygotes[device] = Zygote(device)
    try:
        pid = zygote.spawn(
            {k: v for k, v in config.items() if not k.endswith("_fd")}, env, limits, fds
        )
        return Experiment(pid, lambda timeout: zygote.wait(pid, timeout))
    except ZygoteGone:
        _zygotes.pop(device, None)
    req_w, resp_r, log = fds
    process = subprocess.Popen(
        [sys.executable, "-m", "training.harness_child", json.dumps(config)],
        cwd=config["scratch"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        pass_fds=(req_w, resp_r),
        start_new_session=True,
        preexec_fn=lambda: set_rlimits(limits),
    )
    return Experiment(process.pid, lambda timeout: process.wait(timeout))
