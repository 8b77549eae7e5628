"""A judge backend on any toolgym sampler, and a step's judge cost from its trajectories.

``SamplerJudge(sampler, template)`` is the :class:`toolgym.envs.judge.JudgeBackend` that
``toolgym.envs.judge.LLMJudge`` calls: it renders each chat with the judge model's chat template, samples
every chat of a batch in one ``agenerate`` call (greedy by default), and decodes the replies. Samplers speak
token ids, so the chat template lives here, above the environments (envs never import agents).

Before rendering, every special-token string of the judge's tokenizer (``<|im_start|>``, ``[INST]``, ...)
in the chat's text is broken with a zero-width space: the template's own markers are the only special
tokens of the prompt, whatever the graded answer wrote (the envs side already escapes ``<`` and ``>``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from toolgym.agents.chat import ChatTemplate
from toolgym.agents.samplers import get_sampler
from toolgym.agents.sampling import Sampler, SamplingParams
from toolgym.envs.judge import COST_KEYS, JudgeReply
from toolgym.errors import InfrastructureError

__all__ = ["SamplerJudge", "sampler_judge", "step_metrics"]

GREEDY = SamplingParams(temperature=0.0, max_tokens=96)
_BREAK = "\u200b"


class SamplerJudge:
    """Judge chats with ``sampler``; ``template`` is a ChatTemplate, a tokenizer or a model/asset name."""

    def __init__(self, sampler: Sampler, template: ChatTemplate | Any, params: SamplingParams = GREEDY) -> None:
        self.sampler = sampler
        self.template = template if isinstance(template, ChatTemplate) else ChatTemplate(template)
        self.params = params
        tok = self.template.tokenizer
        added = getattr(tok, "added_tokens_decoder", None) or {}
        specials = set(getattr(tok, "all_special_tokens", None) or [])
        specials |= {str(t) for t in added.values() if getattr(t, "special", False)}
        # longest first, so a marker that contains another is broken whole
        self._specials = sorted((s for s in specials if len(s) > 1), key=len, reverse=True)

    def neutralize(self, text: str) -> str:
        """``text`` with no special-token string of the judge's tokenizer left in it."""
        for s in self._specials:
            if s in text:
                text = text.replace(s, s[0] + _BREAK + s[1:])
        return text

    def prompt_ids(self, chat: list[dict[str, str]]) -> list[int]:
        """The chat's prompt; a final assistant message is the start of the reply (a prefill), after the
        assistant header."""
        safe = [{"role": m["role"], "content": self.neutralize(str(m.get("content") or ""))} for m in chat]
        prefill = safe.pop()["content"] if safe and safe[-1]["role"] == "assistant" else ""
        return self.template.prompt_ids(safe) + (self.template.encode(prefill) if prefill else [])

    async def ajudge(self, chats: list[list[dict[str, str]]]) -> list[JudgeReply]:
        # rendering is tokenizer work: off the loop, as sampling is
        prompts = await asyncio.to_thread(lambda: [self.prompt_ids(c) for c in chats])
        prefills = [str(c[-1].get("content") or "") if c and c[-1].get("role") == "assistant" else None
                    for c in chats]
        replies: list[JudgeReply | None] = [None] * len(chats)
        # a prefilled reply is one line (the verdict's): those sample with a newline stop, the others without
        for want in (False, True):
            idx = [i for i, p in enumerate(prefills) if (p is not None) == want]
            if not idx:
                continue
            params = self.params.with_(n=1, stop=(*self.params.stop, "\n")) if want else self.params.with_(n=1)
            outs = await self.sampler.agenerate([prompts[i] for i in idx], params)
            for i, samples in zip(idx, outs, strict=True):
                s = samples[0]
                if s.finish_reason == "error":
                    raise InfrastructureError(f"judge sampler failed: {s.error or 'no reason given'}")
                text = (prefills[i] or "") + self.template.decode(s.token_ids, skip_special_tokens=True)
                replies[i] = JudgeReply(text, prompt_tokens=len(prompts[i]), completion_tokens=len(s.token_ids))
        return [r for r in replies if r is not None]

    async def aclose(self) -> None:
        await self.sampler.aclose()


def sampler_judge(sampler: str, model: Any, *, tokenizer: Any = None, base_url: str | None = None,
                  device: str | None = None, max_batch_size: int | None = None, params: SamplingParams = GREEDY,
                  **options: Any) -> SamplerJudge:
    """A judge on the registered sampler ``sampler`` ("hf", "vllm", "openai", a plug-in) serving ``model``.
    ``tokenizer`` (default: ``model`` when it is a name) gives the chat template; ``base_url`` a remote
    sampler's server (loopback); ``options`` go to the sampler's constructor."""
    spec = get_sampler(sampler, "judge sampler")
    built = spec.build_for(model, purpose="rollout", device=device, max_batch_size=max_batch_size,
                           base_url=base_url, **options)
    tok = tokenizer if tokenizer is not None else getattr(built, "tokenizer", None) or model
    return SamplerJudge(built, tok, params)


def step_metrics(trajectories: Iterable[Any]) -> dict[str, float]:
    """A step's judge cost from its trajectories' ``metadata["env_info"]["llm_judge"]`` (what each episode's
    judge terms spent): sums of calls, cache hits, failures and tokens, and the mean wait for a verdict, as
    ``judge/KEY``. Empty when no episode was judged. Works wherever the episodes ran (the record travels on
    the trajectory)."""
    rows: Sequence[dict[str, Any]] = [r for t in trajectories
                                      if isinstance(r := ((getattr(t, "metadata", None) or {}).get("env_info") or {})
                                                    .get("llm_judge"), dict)]
    if not rows:
        return {}
    out = {f"judge/{k}": float(sum(float(r.get(k, 0)) for r in rows)) for k in COST_KEYS}
    out["judge/wait_s_mean"] = sum(float(r.get("wait_s", 0.0)) for r in rows) / len(rows)
    return out
