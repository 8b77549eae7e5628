"""The name rules and the Hub half of the one resolver of model, tokenizer and dataset names
(:func:`toolgym.assets.resolve_name`, which knows the asset catalog; this module does not import it).

Order: an existing local path wins, then a toolgym asset name (``toolgym assets list``), then a
Hugging Face Hub id (``owner/name``; datasets may add ``:config``) handed to transformers'
``from_pretrained`` or to ``datasets.load_dataset``. A Hub id that cannot be had (no network,
``HF_HUB_OFFLINE=1``, not in the local Hugging Face cache, no such repository) fails with ONE line
that says how to get a local copy. Nothing heavy is imported at module import time.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlparse

from toolgym.errors import AssetError

KINDS = ("model", "tokenizer", "dataset")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
_PATH_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow", ".gz", ".txt", ".yaml", ".yml",
                  ".safetensors", ".bin", ".pt")


@dataclass(frozen=True)
class Resolved:
    """Where a name points. ``ref`` is what to load: a local folder/file, or the Hub id."""

    name: str
    kind: str  # model | tokenizer | dataset
    source: str  # local | asset | hub
    ref: str
    config: str | None = None  # dataset config of a Hub id ("owner/name:config")


def looks_like_path(name: str) -> bool:
    """Spelled like a file system path rather than an asset name or a Hub id."""
    return (name.startswith((".", "/", "~", "$")) or "\\" in name or name.count("/") > 1
            or name.lower().endswith(_PATH_SUFFIXES))


def split_hub_id(name: str) -> tuple[str, str | None] | None:
    """``(repo_id, config)`` when ``name`` is spelled like a Hub id (``owner/name[:config]``), else None."""
    repo, _, config = name.partition(":")
    if not _HUB_ID.match(repo) or ".." in repo or "--" in repo or repo.endswith((".", "-")):
        return None
    return repo, (config or None)


# ----------------------------------------------------------------------------- the Hub


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE / HF_DATASETS_OFFLINE for datasets) is set."""
    def on(var: str) -> bool:
        return os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")

    if on("HF_HUB_OFFLINE") or on("TRANSFORMERS_OFFLINE"):
        return True
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _endpoint_reachable(timeout_s: float = 5.0) -> bool:
    """A fast "is there a network" check before huggingface_hub's retries (about 20 s when the name does
    not resolve or nothing answers): the endpoint's name resolves and its port takes a connection. Behind
    a proxy the proxy decides: assume yes."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    endpoint = os.environ.get("HF_ENDPOINT")
    if not endpoint:
        try:
            from huggingface_hub import constants

            endpoint = constants.ENDPOINT
        except ImportError:
            endpoint = "https://huggingface.co"
    url = urlparse(endpoint)
    host = url.hostname or "huggingface.co"
    try:
        port = url.port or (80 if url.scheme == "http" else 443)
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def unreachable_message(name: str, kind: str = "model", why: str = "unreachable") -> str:
    """The one line for a Hub id that cannot be had here."""
    repo = name.partition(":")[0] if kind == "dataset" else name
    flag = {"model": "--model", "tokenizer": "--tokenizer", "dataset": "the dataset"}[kind]
    how = (f"download it where you have internet (hf download {repo} --local-dir DIR) and pass {flag} DIR"
           if kind != "dataset" else
           f"download it where you have internet (hf download {repo} --repo-type dataset --local-dir DIR) "
           "and pass DIR, or save it with datasets' save_to_disk and pass that folder")
    return (f"{kind} {name!r} is not a local folder or a toolgym asset, and the Hugging Face Hub is {why}: "
            f"{how}, or see `toolgym assets list`")


def _offline_why() -> str:
    return "off (HF_HUB_OFFLINE is set) and the id is not in the local Hugging Face cache"


def hub_error(name: str, kind: str, exc: BaseException) -> AssetError | None:
    """One-line AssetError for an exception raised while loading a Hub id (None: not a Hub problem)."""
    try:
        from huggingface_hub import errors as hf_errors
    except ImportError:
        return None
    if isinstance(exc, (hf_errors.LocalEntryNotFoundError, hf_errors.OfflineModeIsEnabled)):
        return AssetError(unreachable_message(name, kind, _offline_why() if hub_offline() else "unreachable"))
    if isinstance(exc, hf_errors.GatedRepoError):
        return AssetError(f"{kind} {name!r} is gated on the Hugging Face Hub: accept its terms on "
                          f"https://huggingface.co/{name.partition(':')[0]} and run `hf auth login`")
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return AssetError(f"{kind} {name!r} is not a local folder or a toolgym asset, and the Hugging Face Hub "
                          "has no such repository (private? run `hf auth login`); see `toolgym assets list`")
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return AssetError(f"{kind} {name!r}: revision not found on the Hugging Face Hub")
    if isinstance(exc, hf_errors.EntryNotFoundError):
        what = "tokenizer" if kind == "tokenizer" else "transformers model"
        return AssetError(f"{kind} {name!r}: the Hugging Face Hub repository holds no {what} ({exc.__class__.__name__})")
    if isinstance(exc, hf_errors.HfHubHTTPError):
        return AssetError(f"{kind} {name!r}: the Hugging Face Hub answered {str(exc).splitlines()[0]}")
    text = str(exc)
    if isinstance(exc, OSError) and ("offline" in text.lower() or "connect" in text.lower()
                                     or "local cache" in text.lower() or "internet" in text.lower()):
        return AssetError(unreachable_message(name, kind, _offline_why() if hub_offline() else "unreachable"))
    return None


def check_hub_model(repo_id: str, kind: str) -> None:
    """Make sure ``from_pretrained(repo_id)`` can at least find the repository: its config (or tokenizer
    config) is in the local Hugging Face cache, or the Hub serves it (then it is cached)."""
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache
    except ImportError:
        raise AssetError(f"{kind} {repo_id!r} is a Hugging Face Hub id, and loading it needs transformers "
                         "(pip install transformers)") from None
    files = ("tokenizer_config.json", "config.json") if kind == "tokenizer" else ("config.json",)
    for filename in files:
        if isinstance(try_to_load_from_cache(repo_id, filename), str):
            return
    if hub_offline():
        raise AssetError(unreachable_message(repo_id, kind, _offline_why()))
    if not _endpoint_reachable():
        raise AssetError(unreachable_message(repo_id, kind))
    last: BaseException | None = None
    for filename in files:
        try:
            hf_hub_download(repo_id, filename)
            return
        except Exception as exc:  # noqa: BLE001 - translated below
            err = hub_error(repo_id, kind, exc)
            if err is None:
                raise
            last = err
            from huggingface_hub import errors as hf_errors

            if not isinstance(exc, hf_errors.EntryNotFoundError) or isinstance(exc, hf_errors.LocalEntryNotFoundError):
                break
    assert last is not None
    raise last


def load_error(name: str, kind: str, exc: BaseException) -> AssetError:
    """One line for a failed ``from_pretrained`` of ``name`` (a Hub problem, or the first line of ``exc``)."""
    err = hub_error(name, kind, exc)
    if err is not None:
        return err
    first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
    return AssetError(f"cannot load {kind} {name!r}: {first}; give a local folder, a fetched toolgym asset "
                      "(toolgym assets list) or a Hugging Face Hub id")


# ----------------------------------------------------------------------------- datasets on the Hub


def load_hub_dataset(name: str, repo_id: str, config: str | None, split: str | None) -> list[dict]:
    """Rows of a Hub dataset via ``datasets.load_dataset`` (its own fields, not a toolgym schema);
    ``split`` None takes "test" when the dataset has one, else its first split."""
    try:
        import datasets
    except ImportError:
        raise AssetError(f"dataset {name!r} is a Hugging Face Hub id; loading it needs the `datasets` package "
                         "(pip install datasets), or pass a local file or a toolgym asset name") from None
    if not hub_offline() and not _hub_dataset_cached(repo_id) and not _endpoint_reachable():
        raise AssetError(unreachable_message(name, "dataset"))
    try:
        ds = datasets.load_dataset(repo_id, config, split=split)
    except Exception as exc:  # noqa: BLE001 - translated to one line
        err = hub_error(name, "dataset", exc)
        if err is not None:
            raise err from None
        if hub_offline():
            raise AssetError(unreachable_message(name, "dataset", _offline_why())) from None
        first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        raise AssetError(f"cannot load dataset {name!r} from the Hugging Face Hub: {first}") from None
    if split is None and hasattr(ds, "keys"):
        names = list(ds.keys())
        ds = ds["test" if "test" in names else names[0]]
    return [dict(row) for row in ds]


def _hub_dataset_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import scan_cache_dir
    except ImportError:
        return False
    try:
        return any(r.repo_id == repo_id and r.repo_type == "dataset" for r in scan_cache_dir().repos)
    except Exception:  # noqa: BLE001 - no cache folder yet
        return False
