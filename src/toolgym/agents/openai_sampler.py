"""OpenAISampler: token-id prompts to an OpenAI-compatible `/v1/completions` endpoint (e.g. `vllm serve`).

The prompt goes as a list of token ids; the server is asked for the sampled token ids back
(vLLM's `return_token_ids`, and `return_tokens_as_token_ids` so the log-prob entries name ids, not text)
and one log-prob per token. Transient failures (5xx, timeouts, refused connections) are retried with
exponential backoff; a semaphore bounds the requests in flight.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from toolgym.agents.sampling import ContextOverflow, Sample, Sampler, SamplerError, SamplingParams

_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


class OpenAISampler(Sampler):
    """Samples from an OpenAI-compatible completions server.

    server_logprobs: which distribution the server's log-probs are of. `vllm serve --logprobs-mode
    processed_logprobs` returns those of the sampling distribution ("processed"); vLLM's default is the
    raw model distribution ("raw"), which is what gets recorded then.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_concurrency: int = 16,
        max_retries: int = 4,
        timeout_s: float = 120.0,
        backoff_s: float = 0.5,
        max_model_len: int | None = None,
        server_logprobs: str = "processed",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model = model
        self.api_key = api_key
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.max_model_len = max_model_len
        if server_logprobs not in ("processed", "raw"):
            raise ValueError("server_logprobs must be 'processed' or 'raw'")
        self.server_logprobs = server_logprobs
        self._clients: dict[int, tuple[Any, asyncio.Semaphore]] = {}
        self.retries = 0  # how many retries this sampler has made (observability)

    def _client(self) -> tuple[Any, asyncio.Semaphore]:
        import httpx

        loop = asyncio.get_running_loop()
        key = id(loop)
        if key not in self._clients:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            client = httpx.AsyncClient(timeout=self.timeout_s, headers=headers,
                                       limits=httpx.Limits(max_connections=self.max_concurrency))
            self._clients[key] = (client, asyncio.Semaphore(self.max_concurrency))
        return self._clients[key]

    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        for p in prompts:
            self.check_prompt(p, params)
        return list(await asyncio.gather(*(self._one(p, params) for p in prompts)))

    def request_body(self, prompt: list[int], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt),
            "n": params.n,
            "max_tokens": self.check_prompt(prompt, params),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,  # only the sampled token's log-prob
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.stop:
            body["stop"] = list(params.stop)
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    async def _one(self, prompt: list[int], params: SamplingParams) -> list[Sample]:
        import httpx

        client, sem = self._client()
        body = self.request_body(prompt, params)
        url = f"{self.base_url}/completions"
        last = "no attempt"
        async with sem:
            for attempt in range(self.max_retries + 1):
                if attempt:
                    self.retries += 1
                    await asyncio.sleep(self.backoff_s * (2 ** (attempt - 1)) * (0.5 + random.random()))
                try:
                    resp = await client.post(url, json=body)
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    last = f"{type(exc).__name__}: {exc or 'no detail'}"
                    continue
                if resp.status_code in _RETRY_STATUS:
                    last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                    continue
                if resp.status_code >= 400:
                    text = resp.text[:300]
                    if "context length" in text or "maximum model length" in text or "too long" in text:
                        raise ContextOverflow(f"server rejected the prompt ({len(prompt)} tokens): {text}")
                    raise SamplerError(f"{url} answered HTTP {resp.status_code}: {text}")
                try:
                    return self.parse(resp.json(), params)
                except (ValueError, KeyError, TypeError) as exc:
                    raise SamplerError(f"{url} sent a malformed completion: {exc}") from exc
        raise SamplerError(f"{url} failed after {self.max_retries + 1} attempts; last: {last}")

    def parse(self, data: dict[str, Any], params: SamplingParams) -> list[Sample]:
        """Completion choices -> Samples, ids taken from `token_ids` or the 'token_id:N' log-prob tokens."""
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        kind = params.logprob_kind() if self.server_logprobs == "processed" else "model"
        out = []
        for c in choices:
            lp = c.get("logprobs") or {}
            ids = c.get("token_ids")
            if ids is None:
                toks = lp.get("tokens") or []
                if toks and not all(isinstance(t, str) and t.startswith("token_id:") for t in toks):
                    raise ValueError("server returned token text, not ids (needs return_tokens_as_token_ids)")
                ids = [int(t.split(":", 1)[1]) for t in toks]
            lps = lp.get("token_logprobs")
            if lps is None:
                raise ValueError("server returned no log-probs")
            if len(lps) != len(ids):
                raise ValueError(f"{len(ids)} token ids but {len(lps)} log-probs")
            finish = c.get("finish_reason") or "stop"
            out.append(Sample(token_ids=[int(i) for i in ids],
                              logprobs=[float(x) if x is not None else 0.0 for x in lps],
                              finish_reason="length" if finish == "length" else "stop",
                              logprob_kind=kind, stop_reason=c.get("stop_reason")))
        if len(out) != params.n:
            raise ValueError(f"asked for {params.n} choices, got {len(out)}")
        return out

    async def aclose(self) -> None:
        key = id(asyncio.get_running_loop())
        entry = self._clients.pop(key, None)
        if entry is not None:
            await entry[0].aclose()
        self._clients.clear()  # clients of closed loops die with them
