"""The backend contract (sandbox.backend, issue 37): every backend declares Backend and its workers Worker, and
satisfies each by name and signature; a class that does not is told what it lacks."""

from __future__ import annotations

import pytest

from tests.requirements import need
from tests.sandbox.conftest import LIMITS, require_backend
from toolgym.sandbox.api import BACKENDS
from toolgym.sandbox.backend import Backend, Worker, conformance
from toolgym.sandbox.docker_backend import DockerBackend, DockerWorker
from toolgym.sandbox.local_backend import LocalBackend, LocalWorker


@pytest.mark.parametrize(("cls", "protocol"), [(DockerBackend, Backend), (LocalBackend, Backend),
                                               (DockerWorker, Worker), (LocalWorker, Worker)])
def test_each_backend_and_worker_declares_its_protocol_and_satisfies_it(cls, protocol):
    assert protocol in cls.__mro__  # declared, not only shaped alike
    assert conformance(cls, protocol) == []


def test_every_registered_backend_satisfies_the_protocol():
    for name in BACKENDS:
        assert conformance(BACKENDS.find(name), Backend) == [], name


def test_a_class_off_the_contract_is_told_each_thing_it_lacks():
    class Off:
        name = 3

        def __init__(self, limits, img=None):
            pass

        def new_worker(self, n):
            pass

    class Close:
        def call(self, req, timeout, retries):
            return {}

        def close(self, now=True):
            pass

    assert sorted(conformance(Off, Backend)) == [
        "Off has no method close()",
        "Off.__init__() parameter 2 is 'img' (positional or keyword), not 'image' (positional or keyword)",
        "Off.name is not a str class attribute",
        "Off.new_worker() has further parameters without a default: n"]
    assert conformance(Close, Worker) == ["Close.call() has further parameters without a default: retries"]


@pytest.mark.docker
def test_the_runsc_backend_is_the_docker_backend_on_gvisor_and_keeps_the_contract():
    require_backend("docker")
    import docker

    need("runsc" in (docker.from_env(timeout=10).info().get("Runtimes") or {}),
         "the Docker engine has no runsc runtime (scripts/setup.sh registers it)")
    backend = DockerBackend(LIMITS, runtime="runsc")
    try:
        assert isinstance(backend, Backend) and backend.runtime == "runsc"
        worker = backend.new_worker()
        try:
            assert isinstance(worker, Worker)
            assert worker.container.attrs["HostConfig"]["Runtime"] == "runsc"
            assert worker.call({"op": "ping"}, 60)["ok"] is True
        finally:
            worker.close()
    finally:
        backend.close()
