"""The sampler of a benchmark run (generate and tools modes) and its sampling parameters."""

from __future__ import annotations

from typing import Any

from toolgym.errors import ConfigError
from toolgym.suites.bench_config import BenchConfig, Log


def check_names(cfg: BenchConfig) -> None:
    """Resolve every name the run will load (sampler, model, tokenizer) before anything is written or
    loaded, so a typo is one line and no half-started run folder."""
    from toolgym.agents.samplers import get_sampler
    from toolgym.suites.models import resolve_model

    if cfg.completions is not None:  # scored from a file: the model is only a label
        return
    remote = cfg.mode != "loglik" and get_sampler(cfg.sampler).remote
    if not remote:  # a remote sampler's model is the server's name for it
        resolve_model(cfg.model)
    if cfg.tokenizer or remote:
        resolve_model(cfg.tokenizer or cfg.model, "tokenizer")


def make_sampler(cfg: BenchConfig) -> tuple[Any, Any]:
    """(sampler, chat template) for cfg.sampler, a registered sampler (toolgym.agents.samplers)."""
    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.samplers import get_sampler, names_where
    from toolgym.suites.models import resolve_model

    spec = get_sampler(cfg.sampler)
    if not spec.in_process and cfg.device != "auto":
        raise ConfigError(f"--device applies to --sampler {names_where('in_process')} (and --mode loglik); "
                          f"{cfg.sampler} places the model itself")
    if spec.remote:  # a served name: only the tokenizer is loaded here
        path = cfg.model
        tok_path = resolve_model(cfg.tokenizer or cfg.model, "tokenizer")
    else:
        path = resolve_model(cfg.model)
        tok_path = resolve_model(cfg.tokenizer, "tokenizer") if cfg.tokenizer else path
    template = ChatTemplate(tok_path, tool_parser=cfg.tool_parser)
    # One decode batch per chunk of prompts: two sequential batches of half the size cost nearly twice as many
    # decode steps on CPU. max_batch_size counts rows (samples), not prompts. vllm keeps its compiled graphs
    # (the "bench" default) for throughput.
    return spec.build_for(path, purpose="bench", tokenizer=template.tokenizer, device=cfg.device,
                          max_batch_size=generate_chunk(cfg) * cfg.samples, base_url=cfg.base_url,
                          seed=cfg.seed), template


def shared_sampler(cfg: BenchConfig, state: dict[str, Any], log: Log | None = None) -> tuple[Any, Any]:
    """The run's one (sampler, template), made on first use (said on ``log``: loading can take minutes) and
    closed when the run ends."""
    if "sampler" not in state:
        if log is not None:
            log(f"  loading the model: {cfg.model} ({cfg.sampler} sampler)")
        sampler, template = make_sampler(cfg)
        state["closers"].append(sampler.close)
        state["sampler"] = (sampler, template)
    return state["sampler"]


def generate_chunk(cfg: BenchConfig) -> int:
    """Prompts generated (and then judged) together in generate mode."""
    return max(cfg.batch * 2, 8)


def sampling_params(cfg: BenchConfig) -> Any:
    from toolgym.agents.sampling import SamplingParams

    return SamplingParams(n=cfg.samples, temperature=cfg.temperature, top_p=cfg.top_p,
                          max_tokens=cfg.max_tokens, seed=cfg.seed)
