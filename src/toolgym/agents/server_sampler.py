"""VLLMServerSampler: vLLM as separate server processes that take the trainer's weights while they run.

Token ids in, token ids and log-probs out, through vLLM's token-in/token-out endpoint
(``/inference/v1/generate``, ``--enable-scale-out``): no text round-trips, so token alignment holds as with
the in-process engine. Each answer carries the engine's own ``weight_versions`` spans over its output tokens,
which become ``Sample.token_versions``: a request that spans a weight push is tagged per token by the server.

Weights reach a running server without a restart (its pid stays): the push is written as a safetensors folder
in ``/dev/shm`` (disk when short, :mod:`toolgym.agents.weight_transport`), and each server, paused, loads it
with its workers' own ``reload_weights`` (``/collective_rpc``), labels its weights with the policy version
(``/update_weight_version``) and resumes. vLLM's weight-transfer engines (NCCL, CUDA IPC, ...) need a GPU; a
file in shared memory is what the CPU build can read. ``partial`` picks what happens to requests in flight:

- ``False``: the pause waits for them (``/pause?mode=wait``); they finish on the old weights, tagged so;
  requests that arrive meanwhile wait and run on the new ones.
- ``True``: they are frozen (``mode=keep``), their KV cache dropped (``reset_running_requests``), and resumed
  on the new weights: their later tokens are sampled, and their earlier ones re-read, by the new policy
  (partial rollouts). Their tokens carry both versions, in order.

Several servers (``servers: N`` started, or a list of URLs on loopback) sit behind a
:class:`~toolgym.agents.server_router.Router`.

Each request carries its own seed (``SamplingParams.seed``) where the servers can honour it: then the same
weights and seeds give the same tokens however the requests batch (measured; the log-probs move by ~1e-5 with
the batch), which is what makes a run repeat and a resume exact.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from toolgym.agents.sampling import ContextOverflow, Sample, Sampler, SamplerError, SamplingParams
from toolgym.agents.server_router import Router
from toolgym.agents.vllm_server import VLLMServer, check_loopback, cpu_shares
from toolgym.errors import ConfigError

#: ``vllm serve`` options every started server gets (each overridable)
SERVER_DEFAULTS = {"enable_scale_out": True, "enable_prefix_caching": True}


class VLLMServerSampler(Sampler):
    """Samples from one or more vLLM servers, started here (``servers: N``) or already running (``urls``)."""

    name = "vllm_server"
    weight_names = "checkpoint"  # reload_weights reads what save_pretrained writes

    def __init__(self, model: str, *, servers: int = 1, urls: list[str] | None = None, partial: bool = False,
                 max_model_len: int | None = None, seed: int = 0, python: str | None = None,
                 shm_dir: str = "/dev/shm", timeout_s: float = 600.0, max_concurrency: int = 64,
                 per_request_seeds: bool | None = None, sampling_overrides: dict[str, Any] | None = None,
                 say: Any = None, cpus: list[str | None] | None = None, **engine_kwargs: Any) -> None:
        """``sampling_overrides``: vLLM sampling parameters added to every request (e.g. ``ignore_eos``); one
        that reshapes the distribution makes the recorded log-probs those of the reshaped one. ``cpus``: on the
        CPU build, each started server's cores (None: each its own share of this machine's)."""
        if urls and servers not in (1, len(urls)):
            raise ConfigError(f"servers: give a count or a list of URLs, not both ({servers} and {len(urls)} URLs)")
        if not urls and servers < 1:
            raise ConfigError(f"servers must be >= 1; got {servers}")
        if cpus is not None and len(cpus) != servers:
            raise ConfigError(f"cpus: one core list per server ({servers}); got {len(cpus)}")
        self.partial = bool(partial)
        self.sampling_overrides = dict(sampling_overrides or {})
        #: the weights' dtype on the servers: a push is written in it
        self.dtype = str(engine_kwargs.get("dtype") or "float32")
        self.shm_dir = shm_dir
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.weight_route: Any = None
        self.processes: list[VLLMServer] = []
        self._clients: dict[int, tuple[Any, Any, asyncio.Semaphore]] = {}
        self._push_lock = threading.Lock()
        if urls:
            bases = [check_loopback(u) for u in urls]
        else:
            kwargs = {**SERVER_DEFAULTS, "seed": seed, **engine_kwargs}
            if max_model_len is not None:
                kwargs["max_model_len"] = max_model_len
            if seeded_on_cpu(python, per_request_seeds, self.partial, kwargs):
                kwargs["no_enable_chunked_prefill"] = True  # no split prefill: no generator rewind (below)
            try:  # side by side: each loads the model while the others do, each on its own cores
                for share in cpu_shares(servers) if cpus is None else cpus:
                    self.processes.append(VLLMServer(model, python=python, say=say, wait=False, cpus=share, **kwargs))
                for p in self.processes:
                    p.wait_ready()
            except BaseException:
                self._stop_servers()
                raise
            bases = [p.url for p in self.processes]
        # vLLM rewinds a request's generator when its prefill is split over steps or a partial push re-reads
        # it, which CPU generators cannot do; the CPU build therefore seeds each request only with chunked
        # prefill off and partial false (seeded_on_cpu), else from the engine seed alone, whose stream
        # depends on how requests happen to batch (not reproducible). Servers given by URL: seeded when asked.
        if per_request_seeds is None:
            per_request_seeds = bool(self.processes) and (not self.processes[0].cpu_build or
                                                          "no_enable_chunked_prefill" in kwargs)
        self.per_request_seeds = per_request_seeds
        self.router = Router(bases)
        self.max_model_len = self._served_len(bases[0]) if max_model_len is None else max_model_len

    @property
    def urls(self) -> list[str]:
        return list(self.router.servers)

    def _served_len(self, base: str) -> int | None:
        import httpx

        data = httpx.get(f"{base}/v1/models", timeout=30).json().get("data") or [{}]
        return data[0].get("max_model_len")

    # -- sampling ----------------------------------------------------------------------------------------------

    def _client(self) -> tuple[Any, asyncio.Semaphore]:
        import httpx

        loop = asyncio.get_running_loop()  # one client per event loop (the pipeline's thread runs its own)
        if id(loop) not in self._clients:
            for key in [k for k, (old, _, _) in self._clients.items() if old.is_closed()]:
                del self._clients[key]  # their connections went with their loop
            client = httpx.AsyncClient(timeout=self.timeout_s, limits=httpx.Limits(max_connections=self.max_concurrency))
            self._clients[id(loop)] = (loop, client, asyncio.Semaphore(self.max_concurrency))
        _, client, sem = self._clients[id(loop)]
        return client, sem

    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        for p in prompts:
            self.check_prompt(p, params)
        return list(await asyncio.gather(*(self._one(p, params) for p in prompts)))

    def request_body(self, prompt: list[int], params: SamplingParams) -> dict[str, Any]:
        sp: dict[str, Any] = {"n": params.n, "temperature": params.temperature, "top_p": params.top_p,
                              "max_tokens": self.check_prompt(prompt, params), "logprobs": 0,
                              "include_stop_str_in_output": True, "skip_special_tokens": False,
                              "detokenize": bool(params.stop)}
        if params.top_k > 0:
            sp["top_k"] = params.top_k
        if params.stop:
            sp["stop"] = list(params.stop)
        if params.stop_token_ids:
            sp["stop_token_ids"] = list(params.stop_token_ids)
        if params.seed is not None and self.per_request_seeds:
            sp["seed"] = params.seed
        return {"token_ids": list(prompt), "sampling_params": {**sp, **self.sampling_overrides}}

    async def _one(self, prompt: list[int], params: SamplingParams) -> list[Sample]:
        import httpx

        client, sem = self._client()
        body = self.request_body(prompt, params)
        async with sem:
            i = self.router.acquire(params.affinity)
            url = f"{self.router.servers[i]}/inference/v1/generate"
            try:
                resp = await client.post(url, json=body)
            except httpx.HTTPError as exc:
                raise SamplerError(f"{url}: {type(exc).__name__}: {exc or 'no detail'}") from exc
            finally:
                self.router.release(i)
        if resp.status_code >= 400:
            text = resp.text[:300]
            if "maximum model length" in text or "context length" in text or "too long" in text:
                raise ContextOverflow(f"server rejected the prompt ({len(prompt)} tokens): {text}")
            raise SamplerError(f"{url} answered HTTP {resp.status_code}: {text}")
        try:
            return parse(resp.json(), params)
        except (ValueError, KeyError, TypeError) as exc:
            raise SamplerError(f"{url} sent a malformed answer: {exc}") from exc

    # -- weights -----------------------------------------------------------------------------------------------

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict`` (checkpoint names) into every server, in place, and label it
        ``policy_version`` (0 when unset); in-flight requests as ``partial`` says."""
        folder = self.stage_weights(state_dict)
        try:
            self.load_staged(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def stage_weights(self, state_dict: dict[str, Any]) -> str:
        """Write ``state_dict`` in the servers' dtype as a safetensors folder they can read (shared memory when
        it has room); the caller removes it. The slow half of a push, done before any server pauses."""
        import torch
        from safetensors.torch import save_file

        from toolgym.agents.weight_transport import choose_route, new_weight_folder

        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "half": torch.float16}.get(
            self.dtype, torch.float32)
        nbytes = sum(v.numel() * (dtype.itemsize if v.is_floating_point() else v.element_size())
                     for v in state_dict.values())
        self.weight_route = choose_route(nbytes, shm_dir=self.shm_dir)
        folder = new_weight_folder(self.weight_route.folder)
        try:
            # clone: tied parameters share storage, which safetensors refuses to save twice
            tensors = {k: v.detach().to("cpu", dtype=dtype if v.is_floating_point() else v.dtype).clone().contiguous()
                       for k, v in state_dict.items()}
            save_file(tensors, os.path.join(folder, "model.safetensors"))
            os.chmod(folder, 0o755)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder

    def drop_staged(self, folder: str) -> None:
        """A staged folder no step needs any more."""
        shutil.rmtree(folder, ignore_errors=True)

    def load_staged(self, folder: str) -> None:
        """Every server at once: pause, load ``folder`` in place, label it ``policy_version``, resume. At once,
        so that a request on the last server does not run on the old weights for S reloads, and all servers
        change version together."""
        version = str(self.policy_version or 0)
        with self._push_lock:
            with ThreadPoolExecutor(max_workers=len(self.urls), thread_name_prefix="weight-push") as pool:
                pushes = [pool.submit(self._push_one, base, folder, version) for base in self.urls]
            for push in pushes:  # every server has resumed; the first failure is the one reported
                push.result()

    def _push_one(self, base: str, folder: str, version: str) -> None:
        import httpx

        with httpx.Client(base_url=base, timeout=self.timeout_s) as c:
            def post(path: str, **kw: Any) -> Any:
                try:
                    r = c.post(path, **kw)
                except httpx.TransportError as exc:  # the server is gone or does not answer
                    raise SamplerError(f"weight push to {base}{path}: {type(exc).__name__}: {exc or 'no detail'}") \
                        from exc
                if r.status_code >= 400:
                    raise SamplerError(f"weight push to {base}{path}: HTTP {r.status_code}: {r.text[:300]}")
                return r

            post("/pause", params={"mode": "keep" if self.partial else "wait", "clear_cache": "false"})
            try:
                post("/collective_rpc", json={"method": "reload_weights",
                                              "kwargs": {"weights_path": folder, "is_checkpoint_format": True}})
                # no KV computed with the old weights is reused; partial: running requests re-read theirs
                done = post("/reset_prefix_cache", params={"reset_running_requests": str(self.partial).lower()})
                if not done.json().get("success", True):
                    raise SamplerError(f"weight push to {base}: the prefix cache could not be reset")
                post("/update_weight_version", json={"new_version": version})
            finally:
                post("/resume")

    def weight_version(self, index: int = 0) -> str:
        """The label of the weights server ``index`` holds now."""
        import httpx

        return str(httpx.get(f"{self.urls[index]}/weight_info", timeout=30).json()["weight_version"])

    # -- the end -----------------------------------------------------------------------------------------------

    def _stop_servers(self) -> None:
        for p in self.processes:
            p.stop()

    async def aclose(self) -> None:
        here = self._clients.pop(id(asyncio.get_running_loop()), None)
        if here is not None:
            await here[1].aclose()
        self._clients.clear()  # clients of other loops die with them
        self._stop_servers()


def seeded_on_cpu(python: str | None, per_request_seeds: bool | None, partial: bool,
                  kwargs: dict[str, Any]) -> bool:
    """Whether started CPU-build servers get per-request seeds, and so chunked prefill off: unless asked not
    to, or partial pushes (which re-read running requests), or the caller chose chunked prefill itself.
    Measured on SmolLM2-135M: seeded requests give the same token ids however they batch; their log-probs are
    bit-equal for the same batch and move by up to 3.4e-5 when the batch differs (the CPU kernels are not
    batch-invariant)."""
    if per_request_seeds is False or partial or "enable_chunked_prefill" in kwargs:
        return False
    from toolgym.agents.vllm_server import on_cpu_build, vllm_python

    return on_cpu_build(vllm_python(python))


def parse(data: dict[str, Any], params: SamplingParams) -> list[Sample]:
    """A ``/inference/v1/generate`` answer -> Samples, with per-token versions from its ``weight_versions``."""
    out = []
    for c in sorted(data["choices"], key=lambda c: c.get("index", 0)):
        ids = [int(t) for t in c["token_ids"]]
        content = (c.get("logprobs") or {}).get("content")
        if content is None:
            raise ValueError("no log-probs in the answer")
        if len(content) != len(ids) or any(int(e["token_id"]) != t for e, t in zip(content, ids, strict=True)):
            raise ValueError(f"{len(ids)} token ids but {len(content)} log-probs, or ids that differ")
        finish = c.get("finish_reason") or "stop"
        out.append(Sample(token_ids=ids, logprobs=[float(e["logprob"]) for e in content],
                          finish_reason="length" if finish == "length" else "stop",
                          logprob_kind=params.logprob_kind(), stop_reason=c.get("stop_reason"),
                          token_versions=versions_per_token(c.get("weight_versions"), len(ids))))
    if len(out) != params.n:
        raise ValueError(f"asked for {params.n} samples, got {len(out)}")
    return out


def versions_per_token(spans: list[dict[str, Any]] | None, n: int) -> list[int] | None:
    """``[{"version": "3", "start": 0, "end": 5}, ...]`` -> one integer version per output token (None: the
    server tagged none, or with labels that are not policy versions)."""
    if not spans:
        return None
    out: list[int] = []
    try:
        for s in sorted(spans, key=lambda s: int(s["start"])):
            if int(s["start"]) != len(out):
                return None
            out += [int(s["version"])] * (int(s["end"]) - int(s["start"]))
    except (ValueError, KeyError, TypeError):
        return None
    return out if len(out) == n else None
