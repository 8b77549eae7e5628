"""A training run's config from YAML (or a dict): ``load_config(path_or_dict) -> TrainConfig``.

Reading the file, ``KEY.PATH=VALUE`` overrides and the algorithm's defaults happen here; the sections and
their rules are :mod:`toolgym.training.config_schema` (re-exported below, so ``from toolgym.training.config
import TrainConfig`` keeps working), the type checker :mod:`toolgym.training.config_types`. Unknown keys
and invalid values raise :class:`toolgym.errors.ConfigError` naming the dotted field and what is allowed.
The ``loss`` section's defaults depend on ``algorithm`` (docs/algorithms/); keys given in the file override
them. Torch-free, so ``toolgym train --help`` and config checks stay fast.

Algorithms live in the registry of :mod:`toolgym.training.algorithms` (``register_algorithm``): their
loss and top-level defaults, the dataclass of their ``options:`` section, and their objective.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from toolgym.errors import ConfigError
from toolgym.training.algorithms import Algorithm, get_algorithm
from toolgym.training.config_schema import (
    AGGS,
    CLIP_MODES,
    RATIOS,
    AdvantageConfig,
    Agg,
    CheckpointConfig,
    ClipMode,
    EnvEntry,
    EvalConfig,
    LoggingConfig,
    LoraConfig,
    LossConfig,
    ModelConfig,
    OptimizerConfig,
    Ratio,
    RayConfig,
    RolloutConfig,
    SFTConfig,
    TrainConfig,
)
from toolgym.training.config_types import build
from toolgym.training.examples import find_config

__all__ = ["AGGS", "CLIP_MODES", "RATIOS", "AdvantageConfig", "Agg", "CheckpointConfig", "ClipMode", "EnvEntry", "EvalConfig",
           "LoggingConfig", "LoraConfig", "LossConfig", "ModelConfig", "OptimizerConfig", "Ratio", "RayConfig",
           "RolloutConfig", "SFTConfig", "TrainConfig", "config_to_dict", "dump_config", "load_config"]


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    cur = data
    for k in keys[:-1]:
        nxt = cur.setdefault(k, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section")
        cur = nxt
    cur[keys[-1]] = value


def load_config(source: str | Path | dict[str, Any], overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML file (or take a dict), apply ``KEY.PATH=VALUE`` overrides, validate, return a TrainConfig."""
    import yaml

    if isinstance(source, dict):
        data: Any = _deepcopy(source)
    else:
        p = find_config(source)
        try:
            data = yaml.safe_load(p.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {p} is not valid YAML: {str(exc).splitlines()[0]}") from None
        if data is None:
            data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config: the top level must be a mapping of sections; got {type(data).__name__}")
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: must look like section.key=value")
        _set_dotted(data, key.strip(), yaml.safe_load(raw))

    spec = _with_algorithm_defaults(data)
    options = data.pop("options", None)
    cfg = build(TrainConfig, data, "")
    if spec.options is None:
        if options:
            raise ConfigError(f"options: algorithm {spec.name!r} takes no options section; got {options!r}")
    else:
        cfg.options = build(spec.options, options, "options")
        check_run = getattr(cfg.options, "_check_run", None)  # rules that read other sections too
        if check_run is not None:
            check_run(cfg, "options")
    return cfg


def _with_algorithm_defaults(data: dict[str, Any]) -> Algorithm:
    """Fill ``data`` with the registered algorithm's defaults (its ``loss`` section under the file's keys,
    its top-level keys where the file sets none); return its registry entry."""
    algorithm = data.get("algorithm", "ctpo")
    if not isinstance(algorithm, str):
        raise ConfigError(f"algorithm: must be a registered algorithm name; got {algorithm!r}")
    spec = get_algorithm(algorithm)
    loss = data.get("loss") or {}
    if not isinstance(loss, dict):
        raise ConfigError(f"loss: must be a mapping of LossConfig fields; got {loss!r}")
    data["loss"] = {**spec.loss, **loss}
    for key, value in spec.defaults.items():
        if key != "loss":
            data.setdefault(key, value)
    return spec


def _deepcopy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _deepcopy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_deepcopy(v) for v in x]
    return x


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """Plain, YAML/JSON-ready dict (tuples become lists); ``load_config`` of it gives back an equal config."""

    def plain(x: Any) -> Any:
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    out = plain(cfg)
    if out.get("options") is None:
        out.pop("options", None)
    return out


def dump_config(cfg: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (recorded in every run's output folder)."""
    import yaml

    Path(path).write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
