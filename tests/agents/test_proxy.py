"""The recording proxy: an OpenAI-speaking agent program, run unmodified against it, leaves trajectories whose
ids are the sampled ids verbatim plus the chat template's own, with the mask and behaviour log-probs the
trainer reads; a rewritten history splits; hostile requests get one clear error and the server lives on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.agents.helpers import (
    CALC_TOOL,
    RecordingSampler,
    check_sampled_verbatim,
    recompute_logprobs,
    segments,
)
from tests.agents.tool_caller import train_tool_caller
from toolgym.agents.chat import ChatTemplate
from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.proxy import RecordingProxy
from toolgym.agents.proxy_server import ProxyServer, serve_in_thread
from toolgym.errors import ConfigError

AGENT = Path(__file__).with_name("proxy_agent.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return HFSampler(str(tiny_dir))


def run_agent(url: str, seed: int) -> list[dict]:
    """The agent program in a process of its own, as a user runs it; its final conversation."""
    out = subprocess.run([sys.executable, str(AGENT), str(seed)], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "OPENAI_BASE_URL": url})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def check_alignment(traj, rec: RecordingSampler, tpl: ChatTemplate, model, assistant: list[dict]) -> list:
    """The project's token-alignment checks on a proxy trajectory: each sampled run is what the sampler
    returned for the ids before it (log-probs included), decodes to the turn the program was sent, and the
    model's own log-probs reproduce the behaviour log-probs."""
    samples = check_sampled_verbatim(traj, rec)
    assert len(samples) == len(assistant)
    for sample, msg in zip(samples, assistant, strict=True):
        if not msg.get("tool_calls"):
            assert tpl.decode_turn(sample.token_ids) == msg["content"]
    got, want = recompute_logprobs(model, traj)
    assert got == pytest.approx(want, abs=2e-4)
    return samples


def test_agent_program_leaves_a_token_exact_trajectory(tiny):
    rec = RecordingSampler(tiny)
    tpl = ChatTemplate(tiny.tokenizer)
    proxy = RecordingProxy(rec, tpl, max_tokens=40)
    with serve_in_thread(proxy) as url:
        assert url.startswith("http://127.0.0.1:")
        convo = run_agent(url, seed=3)
        models = httpx.get(url + "/models").json()
    assert [m["id"] for m in models["data"]] == ["toolgym"]
    assistant = [m for m in convo if m["role"] == "assistant"]
    assert len(assistant) >= 2, "the seed should give a multi-turn conversation"
    (traj,) = proxy.take()
    assert proxy.take() == []
    assert "split" not in traj.metadata
    assert traj.prompt_ids == tpl.prompt_ids([convo[0]], [CALC_TOOL])
    samples = check_alignment(traj, rec, tpl, tiny.model, assistant)
    # between sampled turns: only the template's ids for the program's new message and the next header
    zero_runs = [(s, e) for s, e, m in segments(traj.loss_mask) if m == 0]
    assert len(zero_runs) == len(assistant) - 1
    im_end = tiny.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for k, (s, e) in enumerate(zero_runs):
        closed = samples[k].token_ids[-1] == im_end
        want = ("" if closed else "<|im_end|>") + "\n<|im_start|>user\nUse the calc tool.<|im_end|>\n<|im_start|>assistant\n"
        assert tiny.tokenizer.decode(traj.response_ids[s:e]) == want
    assert traj.metadata["requests"] == len(assistant)
    assert traj.behavior_logprobs and all(lp == 0.0 for lp, m in zip(traj.behavior_logprobs, traj.loss_mask, strict=True)
                                          if m == 0)


def test_a_rewritten_history_starts_a_new_trajectory(tiny):
    rec = RecordingSampler(tiny)
    tpl = ChatTemplate(tiny.tokenizer)
    proxy = RecordingProxy(rec, tpl, max_tokens=8)
    first = [{"role": "user", "content": "What is 2 + 3?"}]
    with serve_in_thread(proxy) as url, httpx.Client(base_url=url) as client:
        a = client.post("/chat/completions", json={"messages": first, "seed": 1}).json()["choices"][0]["message"]
        # the program edits what the model said before asking again: those tokens were never sampled
        edited = {"role": "assistant", "content": "I think it is 6."}
        assert edited["content"] != a["content"]
        client.post("/chat/completions", json={"messages": [*first, edited, {"role": "user", "content": "Sure?"}],
                                               "seed": 2}).raise_for_status()
        # the unedited history still continues the first trajectory
        client.post("/chat/completions", json={"messages": [*first, a, {"role": "user", "content": "Sure?"}],
                                               "seed": 3}).raise_for_status()
    one, two = proxy.take()
    assert "split" not in one.metadata and two.metadata["split"]
    assert len(check_sampled_verbatim(one, rec)) == 2
    assert len(check_sampled_verbatim(two, rec)) == 1
    # the edited turn is in the split's prompt, where nothing trains on it
    assert "I think it is 6." in tiny.tokenizer.decode(two.prompt_ids)
    assert "I think it is 6." not in tiny.tokenizer.decode([t for t, m in zip(two.response_ids, two.loss_mask,
                                                                             strict=True) if m])


def test_model_text_becomes_openai_tool_calls_only_when_well_formed(tiny):
    proxy = RecordingProxy(tiny, ChatTemplate(tiny.tokenizer))
    msg, calls = proxy._message('Let me add. <tool_call>{"name": "calc", "arguments": {"expr": "2+3"}}</tool_call>',
                                [CALC_TOOL], 0)
    assert msg["content"] == "Let me add."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [("calc", {"expr": "2+3"})]
    assert msg["tool_calls"] == calls and calls[0]["id"]
    for hostile in ('<tool_call>{"name": "calc", "arguments": </tool_call>', "<tool_call>" * 10_000,
                    '<tool_call>{"name": "\\u0000rm -rf", "arguments": {}}</tool_call>'):
        msg, calls = proxy._message(hostile, [CALC_TOOL], 0)
        assert calls == [] and msg["content"] == hostile and "tool_calls" not in msg
    msg, calls = proxy._message('<tool_call>{"name": "calc", "arguments": {}}</tool_call>', None, 0)
    assert calls == []  # a request without tools gets text


def test_hostile_requests_get_one_clear_error_and_the_server_lives_on(tiny):
    proxy = RecordingProxy(tiny, ChatTemplate(tiny.tokenizer), max_tokens=4)
    ok = {"messages": [{"role": "user", "content": "hi"}]}
    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"messages": "hi"}).encode(), 400, "'messages' must be a non-empty list"),
        (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, "role must be one of"),
        (json.dumps({**ok, "stream": True, "n": 2}).encode(), 400, "only n = 1"),  # refused before any event
        (json.dumps({**ok, "n": 3}).encode(), 400, "only n = 1"),
        (json.dumps({**ok, "temperature": "hot"}).encode(), 400, "temperature must be a number"),
        (json.dumps({**ok, "temperature": -1}).encode(), 400, "temperature"),
        (json.dumps({**ok, "max_tokens": 0}).encode(), 400, "max_tokens"),
        (json.dumps({**ok, "tools": [{"type": "retrieval"}]}).encode(), 400, "function tools"),
        (json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(), 400, "text content"),
        (json.dumps({"messages": [{"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "calc", "arguments": "{oops"}}]}, {"role": "user", "content": "x"}]}).encode(),
         400, "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "not valid JSON"),
        (json.dumps({"messages": [{"role": "user", "content": "x" * 10_000}]}).encode(), 400, "context_length_exceeded"),
        (b"x" * 3_000_000, 413, "request body over"),
    ]
    with serve_in_thread(proxy, max_body_bytes=2_000_000) as url, httpx.Client(base_url=url, timeout=60) as client:
        for body, status, words in cases:
            r = client.post("/chat/completions", content=body, headers={"content-type": "application/json"})
            assert r.status_code == status, (body[:60], r.text[:200])
            err = r.json()["error"]
            assert words in err["message"] and "\n" not in err["message"] and "Traceback" not in err["message"]
        r = client.post("/chat/completions", json=ok, headers={"X-Toolgym-Episode": "e" * 300})
        assert r.status_code == 400
        r = client.post("/chat/completions", json={**ok, "max_tokens": 10**9}, headers={"X-Toolgym-Episode": "ep-7"})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 4  # capped, not refused
        assert client.get("/v1/nowhere").status_code == 404
    (traj,) = proxy.take()
    assert traj.task_id == "ep-7"


def test_the_proxy_listens_on_loopback_only(tiny):
    proxy = RecordingProxy(tiny, ChatTemplate(tiny.tokenizer))
    for host in ("0.0.0.0", "::", "192.168.1.10", "localhost", ""):
        with pytest.raises(ConfigError, match="127.0.0.1 only"):
            ProxyServer(proxy, host=host)
        with pytest.raises(ConfigError, match="127.0.0.1 only"), serve_in_thread(proxy, host=host):
            pass


def test_a_failed_request_leaves_nothing_of_itself_in_the_record(tiny):
    rec = RecordingSampler(tiny)
    proxy = RecordingProxy(rec, ChatTemplate(tiny.tokenizer), max_tokens=6)
    first = [{"role": "user", "content": "What is 2 + 3?"}]
    with serve_in_thread(proxy) as url, httpx.Client(base_url=url, timeout=60) as client:
        a = client.post("/chat/completions", json={"messages": first, "seed": 1}).json()["choices"][0]["message"]
        big = client.post("/chat/completions", json={"messages": [*first, a, {"role": "user", "content": "y" * 9000}]})
        assert big.status_code == 400 and "context_length_exceeded" in big.json()["error"]["message"]
        client.post("/chat/completions", json={"messages": [*first, a, {"role": "user", "content": "Sure?"}],
                                               "seed": 2}).raise_for_status()
    (traj,) = proxy.take()
    assert len(check_sampled_verbatim(traj, rec)) == 2
    assert "y" * 50 not in tiny.tokenizer.decode(traj.response_ids)
    assert [m["role"] for m in traj.turns] == ["user", "assistant", "user", "assistant"]


CALL = '<tool_call>{"name": "calc", "arguments": {"expr": "2+3"}}</tool_call>'


@pytest.fixture(scope="module")
def caller(tiny_dir, tmp_path_factory):
    """A tiny model taught to call calc, then answer from its result: a real policy that writes tool calls."""
    return train_tool_caller(tiny_dir, tmp_path_factory.mktemp("caller"), question="What is 2 + 3? Use the calc tool.",
                             tool=CALC_TOOL, call=CALL, tool_name="calc")


def test_tool_calls_round_trip_through_an_unmodified_agent_program(caller):
    rec = RecordingSampler(caller)
    tpl = ChatTemplate(caller.tokenizer)
    proxy = RecordingProxy(rec, tpl, max_tokens=40)
    with serve_in_thread(proxy) as url:
        convo = run_agent(url, seed=0)
    roles = [m["role"] for m in convo]
    assert roles == ["user", "assistant", "tool", "assistant"], json.dumps(convo)
    (call,) = convo[1]["tool_calls"]
    assert call["function"]["name"] == "calc" and json.loads(call["function"]["arguments"]) == {"expr": "2+3"}
    assert convo[2]["content"] == "5" and "5" in convo[3]["content"]
    (traj,) = proxy.take()
    samples = check_alignment(traj, rec, tpl, caller.model, [convo[1], convo[3]])
    assert tpl.decode_turn(samples[0].token_ids) == CALL  # the call's sampled tokens, not a re-rendering
    (s, e), = [(s, e) for s, e, m in segments(traj.loss_mask) if m == 0]
    assert caller.tokenizer.decode(traj.response_ids[s:e]).endswith("<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")
    assert traj.finish_reason == "stop"


TOOLGYM = str(Path(sys.executable).parent / "toolgym")  # the installed console script


@pytest.mark.slow  # a process that loads torch and the model: ~14 s on the shared machine
def test_toolgym_proxy_runs_a_program_and_writes_its_trajectories(tiny_dir, tmp_path):
    from toolgym.agents.storage import read_header, read_jsonl
    from toolgym.agents.token_text import read_token_text

    out = tmp_path / "agent.jsonl"
    res = subprocess.run([TOOLGYM, "proxy", "--model", str(tiny_dir), "--out", str(out), "--max-tokens", "40", "--device", "cpu",
                          "--", sys.executable, str(AGENT), "3"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    convo = json.loads(res.stdout.splitlines()[0])  # the program's own output comes first
    summary = json.loads(res.stdout.splitlines()[-1])
    (traj,) = read_jsonl(out)
    assert summary["trajectories"] == 1 and summary["splits"] == 0 and summary["program_status"] == 0
    assert summary["sampled_tokens"] == traj.num_model_tokens > 0
    assert [m["content"] for m in traj.turns if m["role"] == "assistant"] == \
        [m["content"] for m in convo if m["role"] == "assistant"]
    assert read_header(out)["meta"]["program_status"] == 0
    pieces = read_token_text(out)  # the viewer's per-token text
    assert set(traj.prompt_ids + traj.response_ids) <= set(pieces)


def test_toolgym_proxy_refuses_other_addresses_in_one_line(tiny_dir, tmp_path):
    res = subprocess.run([TOOLGYM, "proxy", "--model", str(tiny_dir), "--out", str(tmp_path / "x.jsonl"),
                          "--host", "0.0.0.0"], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "127.0.0.1 only" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.slow  # a process that loads torch and the model
def test_toolgym_proxy_serves_until_sigterm_and_keeps_what_it_recorded(tiny_dir, tmp_path):
    import signal

    from toolgym.agents.storage import read_jsonl

    out = tmp_path / "served.jsonl"
    proc = subprocess.Popen([TOOLGYM, "proxy", "--model", str(tiny_dir), "--out", str(out), "--max-tokens", "6"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in proc.stderr:
            if line.startswith("serving OpenAI chat completions at "):
                url = line.split()[-1]
                break
        assert url is not None and url.startswith("http://127.0.0.1:")
        r = httpx.post(url + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=60)
        assert r.status_code == 200
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert json.loads(stdout.splitlines()[-1])["trajectories"] == 1
    (traj,) = read_jsonl(out)
    assert traj.num_model_tokens == r.json()["usage"]["completion_tokens"]


def sse_events(text: str) -> list:
    """The JSON payloads of a server-sent event stream, as a streaming OpenAI client reads them."""
    lines = [ln.removeprefix("data: ") for ln in text.split("\n\n") if ln.strip()]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_streamed_answers_carry_the_same_turn_and_continue_the_trajectory(caller):
    rec = RecordingSampler(caller)
    tpl = ChatTemplate(caller.tokenizer)
    proxy = RecordingProxy(rec, tpl, max_tokens=40)
    messages = [{"role": "user", "content": "What is 2 + 3? Use the calc tool."}]
    with serve_in_thread(proxy) as url, httpx.Client(base_url=url, timeout=60) as client:
        r = client.post("/chat/completions", json={"messages": messages, "tools": [CALC_TOOL], "seed": 0,
                                                   "stream": True, "stream_options": {"include_usage": True}})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.text)
        # what a streaming client assembles from the deltas
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
        assert deltas[0]["role"] == "assistant"
        calls = [c for d in deltas for c in d.get("tool_calls", [])]
        assert [(c["index"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
            [(0, "calc", {"expr": "2+3"})]
        assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "tool_calls"
        assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] > 0
        content = "".join(d.get("content") or "" for d in deltas)
        turn = {"role": "assistant", "content": content or None,
                "tool_calls": [{k: v for k, v in c.items() if k != "index"} for c in calls]}
        messages += [turn, {"role": "tool", "tool_call_id": calls[0]["id"], "content": "5"}]
        r = client.post("/chat/completions", json={"messages": messages, "tools": [CALC_TOOL], "seed": 1, "stream": True})
        answer = "".join(e["choices"][0]["delta"].get("content") or "" for e in sse_events(r.text))
    assert "5" in answer
    (traj,) = proxy.take()  # the streamed turn came back as the proxy sent it: no split
    samples = check_sampled_verbatim(traj, rec)
    assert len(samples) == 2 and tpl.decode_turn(samples[1].token_ids) == answer


def correct(completion: str, task: dict) -> float:
    """The rubric of the program episodes: the program's last message holds the task's answer."""
    convo = json.loads(completion)
    return float(task["answer"] in (convo[-1].get("content") or ""))


def test_a_program_runs_as_an_episode_scored_by_a_rubric(caller):
    import asyncio

    from toolgym.agents.program_episode import run_program_group
    from toolgym.envs.rubric import Rubric

    rec = RecordingSampler(caller)
    tpl = ChatTemplate(caller.tokenizer)
    task = {"question": "What is 2 + 3?", "answer": "5"}
    episodes = asyncio.run(run_program_group(rec, tpl, [sys.executable, str(AGENT)], task,
                                             Rubric([correct], isolate=False), 2, task_id="add-2-3",
                                             max_tokens=40, timeout_s=120))
    assert len(episodes) == 2
    for ep in episodes:
        assert ep.error is None and ep.status == 0 and ep.reward == 1.0 and ep.components == {"correct": 1.0}
        (traj,) = ep.trajectories
        assert traj.reward == 1.0 and traj.reward_breakdown == {"correct": 1.0} and traj.task_id == "add-2-3"
        assert len(check_sampled_verbatim(traj, rec)) == 2


def test_a_program_that_fails_scores_zero_with_its_reason(tiny):
    import asyncio

    from toolgym.agents.program_episode import run_program_episode
    from toolgym.envs.rubric import Rubric

    tpl = ChatTemplate(tiny.tokenizer)
    rubric = Rubric([lambda completion: 1.0], isolate=False)  # would pay anything: a failure must still score 0
    py = sys.executable
    cases = [
        ([py, "-c", "import sys; print('answer 5'); sys.exit('the agent crashed')"], 1, "exited with status 1: the agent crashed"),
        ([py, "-c", "import time; time.sleep(60)"], None, "ran over its limit of 2 s"),
        (["/nonexistent/agent"], None, "did not start"),
    ]
    for command, status, words in cases:
        ep = asyncio.run(run_program_episode(tiny, tpl, command, {}, rubric, timeout_s=2))
        assert ep.status == status and ep.reward == 0.0 and words in ep.error and ep.trajectories == []


class EngineCrash(RecordingSampler):
    """A fault this test cannot cause for real: the engine raising something that is not a SamplerError on its
    first call (then the real sampler answers)."""

    crashed = False

    async def agenerate(self, prompts, params):
        if not self.crashed:
            self.crashed = True
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return await super().agenerate(prompts, params)


def test_an_engine_fault_fails_one_request_and_the_server_goes_on(tiny):
    proxy = RecordingProxy(EngineCrash(tiny), ChatTemplate(tiny.tokenizer), max_tokens=4)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    with serve_in_thread(proxy) as url, httpx.Client(base_url=url, timeout=60) as client:
        r = client.post("/chat/completions", json=body)
        assert r.status_code == 500
        assert r.json()["error"]["message"] == ("the proxy failed: RuntimeError: CUDA error: an illegal memory "
                                                "access was encountered")
        assert client.post("/chat/completions", json=body).status_code == 200
    (traj,) = proxy.take()  # the failed request left nothing
    assert traj.metadata["requests"] == 1 and traj.metadata["sampling"]["max_tokens"] == 4


def test_the_trainer_reads_proxy_trajectories_at_ratio_one(caller):
    """The trainer's own batching and log-prob path (toolgym.training) on what the proxy recorded: at the weights
    that sampled them, every sampled token's log-prob equals its behaviour log-prob (importance ratio 1), and
    template/tool tokens are outside the loss."""
    import torch

    from toolgym.training.update.batch import collate
    from toolgym.training.update.logprobs import response_logprobs

    proxy = RecordingProxy(caller, ChatTemplate(caller.tokenizer), max_tokens=40)
    with serve_in_thread(proxy) as url:
        run_agent(url, seed=0)
        run_agent(url, seed=5)
    trajs = proxy.take()
    assert len(trajs) == 2
    batch = collate(trajs, pad_id=caller.pad_id)
    with torch.no_grad():
        logp, _ = response_logprobs(caller.model, batch, head="full")
    mask = batch.loss_mask.bool()
    assert int(mask.sum()) == sum(t.num_model_tokens for t in trajs)
    assert torch.allclose(logp[mask], batch.rollout_logprobs[mask], atol=2e-4)
