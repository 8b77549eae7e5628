"""The GPU machine's Python image, as import rules: what scripts/gpu_check.py may rely on there.

The lent GPU machine (/work/.library/device/KINDS.md) has Python 3.12 with torch, transformers, peft, pytest and the
packages in :data:`IMAGE`, nothing else, and no network; :data:`WHEELS` travel with the tree (scripts/gpu_wheels.sh
builds them). Two import rules make a CPU machine behave like that image, so the check is rehearsed here and in CI
(tests/test_gpu_check.py) instead of failing on minutes of device time:

- :func:`hide_missing` refuses every module of this environment whose distributions are neither on the image nor
  carried (vLLM, Ray, lm-eval, ...), with the ``ModuleNotFoundError`` the image would raise;
- :func:`stand_in_for_ray` makes ``import ray`` succeed with an inert module where Ray is absent: verl imports Ray
  at the top of modules whose losses never touch it (Ray is over 100 MB; it cannot travel). Any use of the
  stand-in raises, naming itself, so a code path that really needs Ray fails loudly.

``python tests/gpu_image.py --wheels`` prints the wheel pins one a line (scripts/gpu_wheels.sh reads them).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import re
import sys
import types
from collections.abc import Sequence
from typing import Any

# the 'cuda' image's packages, as KINDS.md lists them (read on the machine on 2026-11-17)
IMAGE = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp
""".split())

# what travels as wheels (toolgym's own needs on the check's path, TRL and verl's loss modules); pinned to CI's
WHEELS = (
    "gymnasium==1.4.0", "farama-notifications==0.0.6", "math-verify==0.9.0", "latex2sympy2_extended==1.11.0",
    "jsonschema==4.26.0", "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "rpds-py==2026.9.1",
    "docker==7.2.0", "pytest-asyncio==1.5.0", "trl==1.16.0", "datasets==5.2.0", "dill==0.4.1",
    "multiprocess==0.70.19", "verl==0.9.1", "tensordict==0.10.0", "pyvers==0.1.0", "orjson==3.13.0",
    "importlib_metadata==10.2.0", "hydra-core==1.3.8", "omegaconf==2.3.1", "codetiming==1.4.0",
    "antlr4-python3-runtime==4.9.3",
)
OURS = frozenset({"toolgym"})


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def allowed_distributions() -> frozenset[str]:
    """The image's distributions with what their versions installed here require (this environment's
    huggingface-hub may need a package the image's older one does not: that is skew, not a gap), and the wheels
    (installed with --no-deps there: what they need must be on this list too)."""
    todo = [_norm(n) for n in IMAGE]
    seen: set[str] = set(OURS) | {_norm(w.split("==")[0]) for w in WHEELS}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for req in reqs:
            if "extra ==" not in req.replace('"', "").replace("'", ""):
                todo.append(_norm(re.split(r"[\s;<>=!~\[(]", req.strip(), maxsplit=1)[0]))
    return frozenset(seen)


def missing_modules() -> frozenset[str]:
    """Top-level modules installed here whose every distribution is absent from the image and the wheels."""
    ok = allowed_distributions()
    return frozenset(mod for mod, dists in importlib.metadata.packages_distributions().items()
                     if not mod.startswith("_") and all(_norm(d) not in ok for d in dists))


class _Hide(importlib.abc.MetaPathFinder):
    """Wraps one finder of ``sys.meta_path``: a hidden module is not found (``find_spec`` gives None, as for a
    module that is not installed, so availability probes such as transformers' answer False)."""

    def __init__(self, inner: Any, names: frozenset[str]) -> None:
        self.inner, self.names = inner, names

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.partition(".")[0] in self.names or not hasattr(self.inner, "find_spec"):
            return None
        return self.inner.find_spec(fullname, path, target)

    def find_distributions(self, *args: Any, **kwargs: Any) -> Any:  # importlib.metadata asks the finders
        return getattr(self.inner, "find_distributions", lambda *a, **k: ())(*args, **kwargs)

    def invalidate_caches(self) -> None:
        if hasattr(self.inner, "invalidate_caches"):
            self.inner.invalidate_caches()


def hide_missing() -> frozenset[str]:
    """Refuse, from now on in this process, the modules the image lacks; return their names."""
    names = missing_modules()
    for name in [m for m in sys.modules if m.partition(".")[0] in names]:
        del sys.modules[name]
    sys.meta_path[:] = [f if isinstance(f, _Hide) else _Hide(f, names) for f in sys.meta_path]
    return names


class _Inert:
    """Stands for any Ray object at import time (a decorator, a type in an annotation); using it raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> _Inert:
        return _Inert(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and (isinstance(args[0], type) or callable(args[0])):
            return args[0]  # @ray.remote on a class or function at import time: leave it as it is
        raise RuntimeError(f"{self._name}: Ray is not installed here (tests/gpu_image.py stands in for its import)")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _RayModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Inert(f"{self.__name__}.{attr}")


class _RayLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = _RayModule(spec.name)
        mod.__path__ = []  # a package, so ray.util.collective and friends import too
        mod.__toolgym_stand_in__ = True
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _RayFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "ray" or fullname.startswith("ray."):
            return importlib.machinery.ModuleSpec(fullname, _RayLoader(), is_package=True)
        return None


def stand_in_for_ray() -> bool:
    """Make ``import ray`` give an inert module where Ray cannot be imported; True when the stand-in is in place."""
    if any(isinstance(f, _RayFinder) for f in sys.meta_path):
        return True
    try:
        import ray  # noqa: F401
        return False
    except ImportError:
        for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
            del sys.modules[name]
    sys.meta_path.insert(0, _RayFinder())  # before the hiding rule, which refuses the real Ray
    return True


def main(argv: Sequence[str]) -> int:
    if list(argv) == ["--wheels"]:
        print("\n".join(WHEELS))
        return 0
    print("usage: python tests/gpu_image.py --wheels", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
