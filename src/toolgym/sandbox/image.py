"""The sandbox image: a minimal Debian with python3 (+sympy), g++ and bash.

Built offline from the Debian mirror with `debootstrap` and `docker import`, because
container registries are often unreachable where training runs; a Dockerfile
(`sandbox/image/Dockerfile`) is shipped for places where a registry is reachable.
The executor is not baked in: it is injected at container start, so the image only
changes when the package list does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from toolgym import __version__
from toolgym.errors import SandboxUnavailable

IMAGE_REPO = "toolgym-sandbox"
IMAGE_TAG = __version__
IMAGE = f"{IMAGE_REPO}:{IMAGE_TAG}"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3 (not python3-minimal): json, fractions, decimal, ... live in libpython3-stdlib.
PACKAGES = ("python3", "python3-sympy", "g++", "libc6-dev")
# Paths dropped from the root file system to keep the image small.
_PRUNE = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
          "var/cache/apt", "var/lib/apt/lists", "usr/share/lintian")
DOCKERFILE = Path(__file__).with_name("image") / "Dockerfile"


def image_name() -> str:
    """The tag the docker backend uses (override with TOOLGYM_SANDBOX_IMAGE)."""
    return os.environ.get("TOOLGYM_SANDBOX_IMAGE", IMAGE)


def image_exists(client, name: str | None = None) -> bool:
    import docker.errors

    try:
        client.images.get(name or image_name())
        return True
    except docker.errors.ImageNotFound:
        return False


def build_image(force: bool = False, method: str = "debootstrap", mirror: str = MIRROR,
                log=print) -> str:
    """Build the sandbox image; idempotent (a present tag is kept unless `force`)."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no engine
        raise SandboxUnavailable(f"no Docker engine reachable ({exc}); start dockerd first") from exc
    name = image_name()
    if image_exists(client, name) and not force:
        log(f"image {name} already present (use --force to rebuild)")
        return name
    if method == "dockerfile":
        log(f"building {name} from {DOCKERFILE}")
        client.images.build(path=str(DOCKERFILE.parent), tag=name, rm=True)
        return name
    if method != "debootstrap":
        raise SandboxUnavailable(f"unknown build method {method!r}; use debootstrap or dockerfile")
    if shutil.which("debootstrap") is None:
        raise SandboxUnavailable("debootstrap not found; apt-get install debootstrap (or use --method dockerfile)")
    if os.geteuid() != 0:
        raise SandboxUnavailable("debootstrap needs root; run build-image as root")
    with tempfile.TemporaryDirectory(prefix="toolgym-image-") as tmp:
        root = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
               "--exclude=apt-utils", SUITE, str(root), mirror]
        log("running: " + " ".join(cmd))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-15:])
            raise SandboxUnavailable(f"debootstrap failed (exit {proc.returncode}); is {mirror} reachable?\n{tail}")
        for rel in _PRUNE:
            shutil.rmtree(root / rel, ignore_errors=True)
        (root / "work").mkdir(mode=0o1777, exist_ok=True)
        os.chmod(root / "work", 0o1777)
        tar = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(tar), "."], check=True)
        log(f"importing {tar.stat().st_size >> 20} MiB as {name}")
        client.api.import_image_from_file(
            str(tar), repository=IMAGE_REPO if ":" not in name else name.rsplit(":", 1)[0],
            tag=name.rsplit(":", 1)[1] if ":" in name else IMAGE_TAG,
            changes=["USER 65534:65534", "WORKDIR /work", "ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1",
                     'CMD ["python3"]'])
    log(f"built {name}")
    return name
