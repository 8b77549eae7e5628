"""Connect to Ray: an existing cluster (``address``) or a local one that listens on loopback only.

A local cluster started here binds every Ray service to 127.0.0.1: by default Ray advertises the
machine's outward address, which a single-machine run (and a sandboxed CI box) has no use for.
"""

from __future__ import annotations

import os
from typing import Any

from toolgym.errors import ConfigError, ToolgymError


class RayUnavailable(ToolgymError):
    """Ray is not installed, or the cluster at the given address cannot be reached."""


def import_ray() -> Any:
    """Import ray, or say how to install it."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable("Ray is not installed; install the extra: pip install 'toolgym[ray]'") from None
    return ray


def connect(address: str | None = None, *, num_cpus: int | None = None) -> Any:
    """Attach to the cluster at ``address`` ("host:port", "auto"), or start a loopback-only local one.

    Returns the ray module. Calling it when Ray is already initialised reuses that connection."""
    local = address in (None, "", "local")
    if local or _host(address) in ("127.0.0.1", "localhost", "::1"):
        # Read by ray at import: keeps node addresses (GCS, raylet, object manager) on 127.0.0.1
        # instead of rewriting loopback to the machine's outward address.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if not local and address != "auto":
        _probe(str(address))  # ray.init would retry an unreachable address for minutes
    if not local and "RAY_AUTH_MODE" not in os.environ and _has_token():
        # a cluster from `ray start` checks tokens (Ray >= 2.5x); the client only sends one in token mode
        os.environ["RAY_AUTH_MODE"] = "token"
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if local:  # ray may have been imported before the variable was set: set what it read from it
        try:
            from ray._private import ray_constants

            ray_constants.ENABLE_RAY_CLUSTER = False
        except (ImportError, AttributeError):
            pass
    kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    try:
        if address in (None, "", "local"):
            # address="local": a new cluster even when `ray start` left one (or its address file) behind
            ray.init(address="local", num_cpus=num_cpus, _node_ip_address="127.0.0.1", **kw)
        else:
            if num_cpus is not None:
                raise ConfigError("ray.num_cpus: only for a local cluster; a running cluster has its own resources")
            ray.init(address=address, **kw)
    except ConnectionError as exc:
        raise RayUnavailable(f"ray.address: cannot reach a Ray cluster at {address!r} ({exc}); "
                             "start one with `ray start --head` or use 'local'") from None
    return ray


def _has_token() -> bool:
    from pathlib import Path

    return bool(os.environ.get("RAY_AUTH_TOKEN")) or Path(os.environ.get("RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")
                                                           ).expanduser().is_file()


def _host(address: str | None) -> str:
    if not address:
        return ""
    host = address.split("://")[-1].rsplit(":", 1)[0]
    return host.strip("[]")


def _probe(address: str, timeout_s: float = 5.0) -> None:
    import socket

    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"ray.address: must be host:port (or 'local', 'auto'); got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnavailable(f"ray.address: nothing answers at {address} ({exc.strerror or exc}); start the head "
                             "with `ray start --head --port PORT`, or use 'local'") from None


def shutdown() -> None:
    """Disconnect (and stop a local cluster started by :func:`connect`)."""
    try:
        import ray
    except ImportError:
        return
    if ray.is_initialized():
        ray.shutdown()
