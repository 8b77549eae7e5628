"""Helpers for the agents tests: small environments (the real ones come from toolgym.envs), a sampler
observer, and the token-in/token-out checks shared by the HF, vLLM and OpenAI tests."""

from __future__ import annotations

import asyncio

import torch

from toolgym.agents.sampling import Sample, Sampler

CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}


class ToolEchoEnv:
    """A tiny multi-turn tool env: every step answers with a tool message until `turns` steps were taken.

    Stands in for the real environments of toolgym.envs while those are built; same contract:
    reset(seed, options) -> (messages, info with task_id and tools); step(text) -> 5-tuple.
    """

    def __init__(self, turns: int = 3, tool_latency_s: float = 0.0, raise_on_turn: int | None = None) -> None:
        self.turns = turns
        self.tool_latency_s = tool_latency_s
        self.raise_on_turn = raise_on_turn
        self.t = 0
        self.seed: int | None = None

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[list[dict], dict]:
        self.t, self.seed = 0, seed
        msgs = [{"role": "system", "content": "You are a calculator agent."},
                {"role": "user", "content": f"What is {seed} + 3? Use the calc tool."}]
        return msgs, {"task_id": f"echo-{seed}", "tools": [CALC_TOOL]}

    def step(self, text: str) -> tuple[list[dict], float, bool, bool, dict]:
        self.t += 1
        if self.raise_on_turn == self.t:
            raise RuntimeError("the calc tool crashed")
        if self.t >= self.turns:
            return [], float(str((self.seed or 0) + 3) in text), True, False, {"reward_breakdown": {"correct": 0.0}}
        return [{"role": "tool", "content": f"result {self.t}"}], 0.0, False, False, {}


class AsyncToolEchoEnv(ToolEchoEnv):
    """Same env with asyncio areset/astep and a tool that takes time (sleeps without blocking the loop)."""

    async def areset(self, seed: int | None = None, options: dict | None = None) -> tuple[list[dict], dict]:
        return self.reset(seed=seed, options=options)

    async def astep(self, text: str) -> tuple[list[dict], float, bool, bool, dict]:
        await asyncio.sleep(self.tool_latency_s)
        return self.step(text)


class RecordingSampler(Sampler):
    """Passes every call to a real sampler and remembers what it sampled for which context."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner
        self.max_model_len = inner.max_model_len
        self.name = inner.name
        self.calls: dict[tuple[int, ...], list[Sample]] = {}

    async def agenerate(self, prompts, params):
        out = await self.inner.agenerate(prompts, params)
        for p, group in zip(prompts, out, strict=False):
            self.calls.setdefault(tuple(p), []).extend(group)
        return out


def segments(mask: list[int]) -> list[tuple[int, int, int]]:
    """(start, end, mask value) runs of the loss mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((start, i, mask[start]))
            start = i
    return out


def check_sampled_verbatim(traj, rec: RecordingSampler) -> list[Sample]:
    """Every mask==1 run is exactly what the sampler returned for the context before it."""
    seq = traj.prompt_ids + traj.response_ids
    P = len(traj.prompt_ids)
    used = []
    for s, e, m in segments(traj.loss_mask):
        if m == 1:
            # episodes of a group share their first prompt: the run must be one of that context's samples
            match = [c for c in rec.calls[tuple(seq[: P + s])] if c.token_ids == traj.response_ids[s:e]]
            assert match, "a model-token run is not what the sampler returned for its context"
            # concurrent episodes with one seed sample the same tokens; batch-mates change their log-probs'
            # last bits, so the run's own sample is the one whose log-probs it carries
            sample = next((c for c in match if c.logprobs == traj.behavior_logprobs[s:e]), match[0])
            assert traj.behavior_logprobs[s:e] == sample.logprobs
            used.append(sample)
        else:
            assert all(lp == 0.0 for lp in traj.behavior_logprobs[s:e])
    return used


def recompute_logprobs(model, traj) -> tuple[list[float], list[float]]:
    seq = torch.tensor([traj.prompt_ids + traj.response_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(seq).logits[0].float(), -1)
    P = len(traj.prompt_ids)
    got, want = [], []
    for i, m in enumerate(traj.loss_mask):
        if m:
            got.append(float(logp[P + i - 1, traj.response_ids[i]]))
            want.append(traj.behavior_logprobs[i])
    return got, want
