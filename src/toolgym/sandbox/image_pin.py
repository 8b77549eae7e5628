"""The sandbox image held in the host's memory, every page of every file (threat model: y04, the page cache).

Every Docker sandbox reads the image's files from one copy on the host, so the host's page cache of an image
file is state all sandboxes share: a program makes a file warm (reads it) or cold (drops its pages with
``posix_fadvise``, on runc), and a program in another sandbox reads the bit as the time of its first read.
A pinned image has no such state. A small process of the host maps every file of the image's layers with
``mlockall(MCL_FUTURE)`` in force, so each page is read in once and then locked: no read is ever served from
disk, the kernel's reclaim skips locked pages, and ``posix_fadvise(DONTNEED)`` and ``drop_caches`` leave mapped
pages alone. The cost is the image's size in locked host memory (one copy per process that opens Docker
sandboxes; the pages themselves are the page cache's, shared) and a few seconds to read the image at the first
open. On by default under gVisor (``runsc``), the kernel-per-sandbox option; ``TOOLGYM_SANDBOX_PIN_IMAGE=1``
(or ``open_sandbox(..., pin_image=True)``) turns it on for runc, ``0`` off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

from toolgym.errors import SandboxUnavailable

PIN_ENV = "TOOLGYM_SANDBOX_PIN_IMAGE"
START_TIMEOUT_S = 300.0  # reading a cold 0.5 GB image from a slow disk

# Run by the host's own interpreter, isolated (-I): stdlib only. It locks everything it maps from now on, maps
# every regular file of the layers, reports, and holds the mappings until the host closes its stdin (or dies).
_PINNER = r"""
import ctypes, json, mmap, os, signal, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive the host
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
if libc.mlockall(1 | 2) != 0:  # MCL_CURRENT | MCL_FUTURE: every later mapping is read in and locked
    err = ctypes.get_errno()
    print(json.dumps({"error": "mlockall: " + os.strerror(err)}), flush=True)
    sys.exit(3)
maps, files, size = [], 0, 0
for layer in sys.argv[2:]:
    for root, _dirs, names in os.walk(layer):
        for name in names:
            path = os.path.join(root, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue  # a link, a socket, a fifo
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_size > 0:
                    maps.append(mmap.mmap(fd, 0, prot=mmap.PROT_READ))
                    files += 1
                    size += st.st_size
            except OSError as exc:
                print(json.dumps({"error": path + ": " + str(exc)}), flush=True)
                sys.exit(3)
            finally:
                os.close(fd)
print(json.dumps({"files": files, "bytes": size}), flush=True)
sys.stdin.buffer.read()
"""


@dataclass
class ImagePin:
    """A running pinner: how much it holds."""

    image_id: str
    files: int
    bytes: int
    proc: subprocess.Popen
    users: int = 0


_PINS: dict[str, ImagePin] = {}
_LOCK = threading.Lock()


def pin_choice(pin: bool | None, gvisor: bool) -> bool:
    """Whether to pin: the caller's choice, else env TOOLGYM_SANDBOX_PIN_IMAGE, else on under gVisor only."""
    if pin is not None:
        return pin
    env = os.environ.get(PIN_ENV, "").strip().lower()
    if env:
        return env not in ("0", "false", "no", "off")
    return gvisor


def image_layers(client, image: str) -> tuple[str, list[str]]:
    """(the image's id, its layer folders on the host): Docker's overlay2 storage only."""
    attrs = client.images.get(image).attrs
    driver = attrs.get("GraphDriver") or {}
    if driver.get("Name") != "overlay2":
        raise SandboxUnavailable(
            f"pinning the sandbox image needs Docker's overlay2 storage (this engine stores it with "
            f"{driver.get('Name') or 'a snapshotter'}); set {PIN_ENV}=0 to run without it (threat model: y04)")
    data = driver.get("Data") or {}
    layers = [d for d in [data.get("UpperDir"), *(data.get("LowerDir") or "").split(":")] if d]
    unreadable = [d for d in layers if not os.access(d, os.R_OK | os.X_OK)]
    if unreadable:
        raise SandboxUnavailable(
            f"pinning the sandbox image reads its layers under {os.path.dirname(unreadable[0])}, which this user "
            f"cannot read: run as root, or set {PIN_ENV}=0 to run without it (threat model: y04)")
    return attrs["Id"], layers


def acquire(client, image: str) -> ImagePin:
    """The image pinned for this process (started at the first call, shared by later ones)."""
    image_id, layers = image_layers(client, image)
    with _LOCK:
        pin = _PINS.get(image_id)
        if pin is None or pin.proc.poll() is not None:
            pin = _PINS[image_id] = _start(image_id, layers)
        pin.users += 1
        return pin


def release(pin: ImagePin) -> None:
    """One user fewer; the last one unlocks the image."""
    with _LOCK:
        pin.users -= 1
        if pin.users > 0:
            return
        if _PINS.get(pin.image_id) is pin:
            del _PINS[pin.image_id]
    _stop(pin.proc)


def _start(image_id: str, layers: list[str]) -> ImagePin:
    proc = subprocess.Popen([sys.executable, "-I", "-c", _PINNER, str(os.getpid()), *layers],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    try:
        report = json.loads(line[0]) if line and line[0] else {"error": "the pinner exited without a word"}
    except ValueError:
        report = {"error": f"the pinner said {line[0][:200]!r}"}
    if not line:
        report = {"error": f"no answer in {START_TIMEOUT_S:.0f} s"}
    if "error" in report:
        _stop(proc)
        raise SandboxUnavailable(f"the sandbox image could not be pinned in memory ({report['error']}); "
                                 f"set {PIN_ENV}=0 to run without it (threat model: y04)")
    return ImagePin(image_id, int(report["files"]), int(report["bytes"]), proc)


def _stop(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
