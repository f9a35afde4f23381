"""Hosts on one machine: Linux network namespaces joined through a bridge, for multi-host tests.

A `Lab` is a hub namespace holding a bridge and one namespace per host, each with a veth whose
other end sits on the hub's bridge, so every host reaches the hub's IP and nothing else: not the
machine's own network, not another namespace's loopback. The veths are created directly inside
the namespaces (never in the root namespace), so deleting the namespaces removes every link.
Names carry the test process's pid: a crashed earlier run cannot collide with this one, and
`remove_leftovers` knows which namespaces belong to runs that are gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

PREFIX = "rsmh"  # research-swarm multi-host; every namespace this module makes starts with it
SUBNET = "10.213.7"  # private; namespaces are isolated, so concurrent labs may reuse it
# `sh -c SCRIPT NAME ARGV...`: take the host name NAME ($0), then become ARGV.
AS_HOST = ("sh", "-c", 'hostname "$0" && exec "$@"')


class LabUnavailable(RuntimeError):
    """This machine cannot build namespaces (not root, no `ip`, no `unshare`): skip, not fail."""


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)


def _must(*args: str) -> None:
    done = _ip(*args)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def kill_namespace(name: str) -> None:
    """SIGKILL whatever still runs inside `name` (only our processes live there), then delete it."""
    for pid in _ip("netns", "pids", name).stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> list[str]:
    """Delete namespaces a crashed earlier run left (their creator's pid is gone)."""
    removed = []
    for line in _ip("netns", "list").stdout.splitlines():
        name = line.split(" ", 1)[0]
        owner = name.removeprefix(PREFIX).split("-", 1)[0]
        if name.startswith(PREFIX) and owner.isdigit() and not _pid_alive(int(owner)):
            kill_namespace(name)
            removed.append(name)
    return removed


@dataclass
class Lab:
    """`hosts` names the namespaces besides the hub; each gets the next IP on the hub's bridge."""

    hosts: tuple[str, ...]
    prefix: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    created: list[str] = field(default_factory=list)

    hub_ip = f"{SUBNET}.1"

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def ip(self, host: str) -> str:
        return self.hub_ip if host == "hub" else f"{SUBNET}.{self.hosts.index(host) + 2}"

    def create(self) -> None:
        """Build the namespaces and links; LabUnavailable when this machine does not allow it."""
        if os.geteuid() != 0:
            raise LabUnavailable("network namespaces need root")
        for tool in ("ip", "unshare"):
            if shutil.which(tool) is None:
                raise LabUnavailable(f"no `{tool}` binary")
        remove_leftovers()
        for host in ("hub", *self.hosts):
            done = _ip("netns", "add", self.ns(host))
            if done.returncode != 0:
                raise LabUnavailable(f"ip netns add failed: {done.stderr.strip()}")
            self.created.append(self.ns(host))
            _must("-n", self.ns(host), "link", "set", "lo", "up")
        hub = self.ns("hub")
        _must("-n", hub, "link", "add", "br0", "type", "bridge")
        _must("-n", hub, "addr", "add", f"{self.hub_ip}/24", "dev", "br0")
        _must("-n", hub, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            # Interface names are limited to 15 characters; they only need to be unique per
            # namespace, but the prefix makes a stray one easy to attribute.
            end, peer = f"{self.prefix}h{i}", f"{self.prefix}p{i}"
            _must(
                *("link", "add", end, "netns", self.ns(host), "type", "veth"),
                *("peer", "name", peer, "netns", hub),
            )
            _must("-n", hub, "link", "set", peer, "master", "br0", "up")
            _must("-n", self.ns(host), "addr", "add", f"{self.ip(host)}/24", "dev", end)
            _must("-n", self.ns(host), "link", "set", end, "up")

    def command(self, host: str, argv: list[str]) -> list[str]:
        """`argv` run on `host`: inside its network namespace and under its own host name (a UTS
        namespace), so trainers and researchers name themselves after it as on a real machine.
        `ip netns exec`, `unshare` and `sh -c exec` all exec in place: the pid is the command's."""
        return ["ip", "netns", "exec", self.ns(host), "unshare", "--uts", *AS_HOST, host, *argv]

    def destroy(self) -> None:
        """Kill what runs inside, delete the namespaces (and with them every veth and the bridge).
        Idempotent."""
        while self.created:
            kill_namespace(self.created.pop())
