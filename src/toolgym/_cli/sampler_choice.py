"""The sampler options `toolgym rollout` and `toolgym proxy` share, checked before any model loads."""

from __future__ import annotations

from typing import Any

from toolgym.errors import ConfigError


def check_sampler_choice(sampler: str, device: str | None, tool_parser: str | None) -> tuple[Any, dict[str, Any]]:
    """The registered sampler's spec and the device keywords it takes; an unknown parser, sampler or device, or
    a device given to a sampler that places the model itself, fails here in one line."""
    from toolgym.agents.samplers import get_sampler, names_where

    if tool_parser is not None:
        from toolgym.envs.parsing import get_format

        get_format(tool_parser)
    spec = get_sampler(sampler)  # a registered sampler (plug-ins included), else one line naming them
    device_kwargs: dict[str, Any] = {}
    if device is not None:
        from toolgym.devices import check_device, resolve_device

        device = check_device(device, "--device")
        if not spec.in_process and device != "auto":
            raise ConfigError(f"--device applies to --sampler {names_where('in_process')}; {sampler} places the model "
                              "itself")
        if spec.in_process:
            device_kwargs["device"] = resolve_device(device, what="--device", local_rank=None)
    return spec, device_kwargs
