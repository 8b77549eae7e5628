"""Sampler registry: ``rollout.sampler: NAME`` in a training config and ``--sampler NAME`` on the command
line name an entry here. Built in: ``hf``, ``vllm``, ``vllm_server``, ``openai``; third-party packages add theirs through the
entry-point group ``toolgym.samplers``, as environments do through ``toolgym.envs``, and a config may name
an installed one that declares no entry point as ``package.module:SPEC`` (a :class:`SamplerSpec`).

An entry's capability flags are what the trainer, the config check, weight sync, suites and the CLI read;
none of them compares sampler names:

- ``in_process``: builds on a model it is handed, in this process, on the device it is given. The trainer
  hands it its own module, so it samples the current policy with nothing to copy.
- ``needs_weight_push``: holds its own copy of the policy; the trainer pushes the weights to it
  (``update_weights(state_dict)``) before the first rollouts and after every update.
- ``logprobs``: returns the behaviour log-prob of each sampled token (``loss.mismatch_weight`` needs them).
- ``remote``: samples on a server at ``base_url``; ``model`` is the served name, and the chat template's
  tokenizer comes from a local copy.
- ``pushes_while_sampling``: takes weight pushes while requests are in flight and tags each token with the
  version that sampled it (servers): the pipeline (``rollout.max_staleness >= 1``) samples ahead with it
  from the trainer's process, with no rollout worker processes. With ``rollout.push_on: schedule`` it also
  stages a version beside the update and loads it later: ``stage_weights(state_dict) -> handle``,
  ``load_staged(handle)`` (labelled ``policy_version``) and ``drop_staged(handle)``.

A sampler that is neither ``in_process`` nor ``needs_weight_push`` cannot follow training (it samples the
initial policy throughout): training refuses it unless ``rollout.frozen_policy_ok`` is set.

An entry is built as ``factory(model, **options)``. The options callers pass, by capability: ``tokenizer``,
``device`` and ``max_batch_size`` to an in-process sampler; ``base_url`` to a remote one; ``seed`` to one
that runs its own engine (not in-process, not remote); ``max_model_len`` where the caller bounds the
context; and whatever ``rollout.sampler_kwargs`` holds. Torch-free: factories import their backend when called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolgym._registry import Registry, import_reference
from toolgym.errors import ConfigError

ENTRY_POINT_GROUP = "toolgym.samplers"

#: what a caller builds a sampler for: a ``SamplerSpec.defaults`` key
PURPOSES = ("rollout", "bench", "train")


@dataclass(frozen=True)
class SamplerSpec:
    """One registered sampler: how to build it and what it can do (see the module docstring)."""

    name: str
    factory: str | Callable[..., Any]  # "module:function" (imported when first built) or a callable
    in_process: bool = False
    needs_weight_push: bool = False
    logprobs: bool = True
    remote: bool = False
    pushes_while_sampling: bool = False
    description: str = ""
    #: constructor options per purpose ("rollout": ``toolgym rollout``, "bench": suites, "train": the
    #: trainer), under the caller's own
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: ``(train config, device) -> options`` for the trainer's sampler, ``rollout.sampler_kwargs`` merged
    #: in by the hook itself ("module:function" or a callable); None: ``rollout.sampler_kwargs`` as given
    train_options: str | Callable[[Any, str], dict[str, Any]] | None = None

    @property
    def follows_training(self) -> bool:
        """Samples the policy being trained: it runs the trainer's module, or it takes weight pushes."""
        return self.in_process or self.needs_weight_push

    def build(self, model: Any, *, purpose: str = "rollout", **options: Any) -> Any:
        """The sampler for ``model`` (a path, a served name, or for an in-process sampler a module)."""
        if purpose not in PURPOSES:
            raise ValueError(f"purpose must be one of {PURPOSES}; got {purpose!r}")
        return _load(self.factory)(model, **{**self.defaults.get(purpose, {}), **options})

    def build_for(self, model: Any, *, purpose: str, tokenizer: Any = None, device: str | None = None,
                  max_batch_size: int | None = None, base_url: str | None = None, seed: int | None = None,
                  max_model_len: int | None = None, **options: Any) -> Any:
        """The sampler for ``model``, handed what its kind takes (the module docstring's rule, written once for
        the trainer, the suites and the CLI): an in-process sampler the tokenizer, device and batch size, a
        remote one the server's URL, one with an engine of its own the seed; ``max_model_len`` to any.
        ``options`` (e.g. ``rollout.sampler_kwargs``) win over all of them."""
        given: dict[str, Any] = {}
        if self.in_process:
            given.update({k: v for k, v in (("tokenizer", tokenizer), ("device", device),
                                            ("max_batch_size", max_batch_size)) if v is not None})
        elif self.remote:
            given["base_url"] = base_url
        elif seed is not None:
            given["seed"] = seed
        if max_model_len is not None:
            given["max_model_len"] = max_model_len
        return self.build(model, purpose=purpose, **{**given, **options})

    def options_for_training(self, cfg: Any, device: str) -> dict[str, Any]:
        """Constructor options of the trainer's sampler (``train_options``, or ``rollout.sampler_kwargs``)."""
        if self.train_options is None:
            return dict(cfg.rollout.sampler_kwargs)
        return dict(_load(self.train_options)(cfg, device))


def _register_spec(entry_point: str, obj: SamplerSpec) -> None:
    register_sampler(obj.name, obj.factory, in_process=obj.in_process, needs_weight_push=obj.needs_weight_push,
                     logprobs=obj.logprobs, remote=obj.remote, pushes_while_sampling=obj.pushes_while_sampling,
                     description=obj.description, defaults=obj.defaults, train_options=obj.train_options)


SAMPLERS: Registry[SamplerSpec] = Registry("sampler", ENTRY_POINT_GROUP,
                                           accepts=lambda obj: isinstance(obj, SamplerSpec),
                                           register=_register_spec)
#: the plug-ins that failed to load: "name (module:attr)" -> their error
plugin_errors: dict[str, str] = SAMPLERS.errors


def register_sampler(name: str, factory: str | Callable[..., Any], *, in_process: bool = False,
                     needs_weight_push: bool = False, logprobs: bool = True, remote: bool = False,
                     pushes_while_sampling: bool = False, description: str = "", defaults: Mapping[str, Mapping[str, Any]] | None = None,
                     train_options: str | Callable[[Any, str], dict[str, Any]] | None = None,
                     override: bool = False) -> SamplerSpec:
    """Make ``--sampler NAME`` and ``rollout.sampler: NAME`` valid. Re-registering a name needs
    ``override=True``, so two plug-ins cannot silently shadow each other."""
    if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"sampler name {name!r} must be a word (letters, digits, - and _)")
    if in_process and needs_weight_push:
        raise ConfigError(f"sampler {name!r}: in_process (runs the trainer's module) and needs_weight_push (holds "
                          "its own copy) exclude each other")
    if not (isinstance(factory, str) and ":" in factory) and not callable(factory):
        raise ConfigError(f"sampler {name!r}: factory must be 'module:function' or a callable; got {factory!r}")
    stray = set(defaults or {}) - set(PURPOSES)
    if stray:
        raise ConfigError(f"sampler {name!r}: defaults keys must be among {PURPOSES}; got {sorted(stray)}")
    if pushes_while_sampling and not needs_weight_push:
        raise ConfigError(f"sampler {name!r}: pushes_while_sampling needs needs_weight_push")
    spec = SamplerSpec(name, factory, in_process, needs_weight_push, logprobs, remote, pushes_while_sampling,
                       description, {k: dict(v) for k, v in (defaults or {}).items()}, train_options)
    old = SAMPLERS._entries.get(name)
    if old is not None and not override and old != spec:
        raise ConfigError(f"sampler {name!r} is already registered ({old.factory!r}); pass "
                          "override=True to replace it")
    SAMPLERS.add(name, spec)
    return spec


def load_plugins(force: bool = False) -> None:
    """Register every entry point in the ``toolgym.samplers`` group (once; the built-ins are registered on
    import).

    An entry point's object is a :class:`SamplerSpec` (registered under its own name) or a hook ``fn()``
    that calls :func:`register_sampler` itself. A broken plug-in is recorded in ``plugin_errors`` (named
    when its sampler is asked for) instead of breaking every other sampler."""
    SAMPLERS.load_plugins(force)


def get_sampler(name: str, what: str = "--sampler") -> SamplerSpec:
    """The registered sampler ``name``; otherwise a ConfigError naming ``what`` (the option or config field),
    the registered names and a close match."""
    return SAMPLERS.find(name, what)


def list_samplers() -> list[str]:
    """Registered sampler names: built-ins first, then plug-ins, in registration order."""
    return list(SAMPLERS)


def names_where(flag: str) -> str:
    """The registered samplers with ``flag`` set ("in_process", "follows_training", ...), as "a or b" for
    a message that says which to use."""
    return " or ".join(n for n in list_samplers() if getattr(SAMPLERS[n], flag))


def _register_builtins() -> None:
    f = "toolgym.agents.sampler_factories"
    register_sampler("hf", f"{f}:hf", in_process=True, description="transformers in this process (CPU or CUDA)",
                     defaults={"train": {"max_batch_size": 64}}, train_options=f"{f}:hf_train_options")
    # the CPU build starts faster eager; a suite run is long enough for the compiled graphs to pay
    register_sampler("vllm", f"{f}:vllm", needs_weight_push=True, description="an in-process vLLM engine",
                     defaults={"rollout": {"enforce_eager": True}, "bench": {"enforce_eager": False}},
                     train_options=f"{f}:vllm_train_options")
    register_sampler("openai", f"{f}:openai", remote=True,
                     description="an OpenAI-compatible server (/v1/completions with token ids)")
    register_sampler("vllm_server", f"{f}:vllm_server", needs_weight_push=True, pushes_while_sampling=True,
                     description="vLLM server processes on 127.0.0.1 (started here, or rollout.servers: URLs), "
                                 "weights pushed while they run", defaults={"rollout": {"enforce_eager": True}},
                     train_options=f"{f}:vllm_server_train_options")


def _load(ref: str | Callable[..., Any]) -> Callable[..., Any]:
    return ref if callable(ref) else import_reference(ref)


_register_builtins()
