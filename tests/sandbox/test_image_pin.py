"""When the sandbox image is pinned in host memory, and what a refusal says (toolgym.sandbox.image_pin)."""

from __future__ import annotations

import os

import pytest

from tests.requirements import need
from tests.sandbox.conftest import LIMITS
from tests.sandbox.test_kernel_channels import EVICT, _host_file, _resident, _runtime_ready
from toolgym.errors import SandboxUnavailable
from toolgym.sandbox import open_sandbox
from toolgym.sandbox.api import SandboxRequestError, make_backend
from toolgym.sandbox.image_pin import PIN_ENV, image_layers, pin_choice
from toolgym.sandbox.types import Limits


@pytest.mark.parametrize(("pin", "env", "gvisor", "expected"), [
    (None, "", True, True),  # the kernel-per-sandbox option closes y04 by default
    (None, "", False, False),  # runc: opt in (it costs the image's size in locked memory)
    (None, "1", False, True),
    (None, "0", True, False),
    (None, "off", True, False),
    (True, "0", False, True),  # the caller's word wins over the environment
    (False, "1", True, False),
])
def test_pin_choice(monkeypatch, pin, env, gvisor, expected):
    monkeypatch.setenv(PIN_ENV, env)
    assert pin_choice(pin, gvisor) is expected


class _Images:
    def __init__(self, attrs):
        self.attrs = attrs

    def get(self, name):
        return self


class _Client:  # stand-in for an engine whose storage is not overlay2: a fault this host's engine cannot show
    def __init__(self, driver):
        self.images = _Images({"Id": "sha256:x", "GraphDriver": driver})


def test_an_engine_without_overlay2_is_one_line_naming_the_way_out():
    with pytest.raises(SandboxUnavailable) as err:
        image_layers(_Client({"Name": "vfs", "Data": {}}), "img")
    msg = str(err.value)
    assert "\n" not in msg and "overlay2" in msg and "vfs" in msg and f"{PIN_ENV}=0" in msg


def test_unreadable_layers_are_one_line_naming_the_way_out(tmp_path):
    missing = tmp_path / "no-such-layer" / "diff"
    with pytest.raises(SandboxUnavailable) as err:
        image_layers(_Client({"Name": "overlay2", "Data": {"UpperDir": str(missing)}}), "img")
    msg = str(err.value)
    assert "\n" not in msg and "run as root" in msg and f"{PIN_ENV}=0" in msg


def test_pinning_is_the_docker_backends_option():
    with pytest.raises(SandboxRequestError, match="pin_image=True is the docker backend's"):
        make_backend("local", Limits(), pin_image=True)


# y04 closed by construction: with the image pinned (toolgym.sandbox.image_pin), every page of every image file
# stays in the host's memory while a sandbox is open, so no first read is ever served from disk (nothing to time)
# and no one can make a file cold: not a program's posix_fadvise (runc), not the host's own eviction (the same
# advice as root, which is what memory pressure does to an unlocked page).
def _image_files(count: int) -> list[str]:
    """`count` files of the image spread over its layers, biggest first among every 50th (more pages to count)."""
    import docker

    from toolgym.sandbox.image import image_name
    from toolgym.sandbox.image_pin import image_layers

    _, layers = image_layers(docker.from_env(timeout=10), image_name())
    found = sorted(os.path.join(root, n) for layer in layers for root, _, names in os.walk(layer) for n in names)
    regular = [p for p in found if not os.path.islink(p) and os.path.isfile(p) and os.path.getsize(p) > 64 << 10]
    return sorted(regular[::50], key=os.path.getsize, reverse=True)[:count]


def _evict(path: str) -> None:
    """The host drops the file's pages from its page cache (as its owner: root)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_a_pinned_image_keeps_every_file_resident_whoever_drops_it(runtime):
    _runtime_ready(runtime)
    need(os.geteuid() == 0, "reading and dropping the host's page cache of image files takes their owner (root)")
    files = _image_files(8)
    assert len(files) == 8
    for path in files:  # unpinned, the host's advice empties a file's pages: the state a program could read
        _evict(path)
        resident, pages = _resident(path)
        need(resident < pages // 2 or not _mapped_elsewhere(path),
             "another process holds the image pinned (a runsc sandbox open beside this test)")
        assert resident < pages // 2, (path, resident, pages)
    with open_sandbox("docker", LIMITS, pool_size=1, runtime=runtime, pin_image=True) as sb:
        res = sb.run(EVICT)  # a program's advice too (passed through to the host on runc)
        assert res.status == "ok", res
        files.append(_host_file(res.stdout.strip()))
        for path in files:
            _evict(path)
        assert sb.run(EVICT).status == "ok"
        for path in files:
            resident, pages = _resident(path)
            assert resident == pages, (path, resident, pages)
    for path in files:  # closed: the pin is gone with the last sandbox that used it
        _evict(path)
        resident, pages = _resident(path)
        assert resident < pages // 2, (path, resident, pages)


def _mapped_elsewhere(path: str) -> bool:
    """Some other process maps `path` (a pinner of another test run): its pages cannot be dropped then."""
    me = str(os.getpid())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as fh:
                if pid != me and path in fh.read():
                    return True
        except OSError:
            continue
    return False
