"""Agent programs as episodes: the official `openai` client script (examples/openai_agent.py) runs unmodified
against the recording proxy and leaves token-exact trajectories; an untrusted program runs in a jail with no
network but the proxy, none of this machine's files and no way to outlive its episode; a trusted one runs under
resource limits."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.agents.helpers import RecordingSampler, check_sampled_verbatim, recompute_logprobs, segments
from tests.agents.tool_caller import train_tool_caller
from tests.requirements import need
from toolgym.agents.chat import ChatTemplate
from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.program_episode import run_program_episode
from toolgym.agents.program_jail import ProgramLimits, jail_unavailable
from toolgym.agents.proxy import RecordingProxy
from toolgym.agents.proxy_server import serve_in_thread
from toolgym.agents.sampling import SamplingParams
from toolgym.envs.rubric import Rubric

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "openai_agent.py"
QUESTION = "What is 2 + 3?"
CALL = '<tool_call>{"name": "python", "arguments": {"code": "print(2+3)"}}</tool_call>'


def agent_tool() -> dict:
    """The tool schema the example script sends, read from the script itself (so the test follows it)."""
    import ast

    tree = ast.parse(AGENT.read_text())
    node = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "TOOL")
    return ast.literal_eval(node)


# The tiny model learns its conversation to a loss of 0.005 nats a token, so at temperature 1 about one run in
# ten strays from it at some token and never comes back (a full run at 6237700 saw "Thename..."): the jail and
# the client are under test here, not sampling, so these runs are greedy.
GREEDY = SamplingParams(temperature=0.0, max_tokens=64)


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return HFSampler(str(tiny_dir))


@pytest.fixture(scope="module")
def py_caller(tiny_dir, tmp_path_factory):
    """A tiny model taught the example script's conversation: call the python tool, then answer from its
    result, so the script's whole loop runs."""
    return train_tool_caller(tiny_dir, tmp_path_factory.mktemp("py_caller"), question=QUESTION, tool=agent_tool(),
                             call=CALL, tool_name="python")


def test_the_official_client_script_runs_unmodified_and_leaves_token_exact_trajectories(py_caller):
    rec = RecordingSampler(py_caller)
    tpl = ChatTemplate(py_caller.tokenizer)
    proxy = RecordingProxy(rec, tpl, max_tokens=64, params=GREEDY)
    with serve_in_thread(proxy) as url:
        res = subprocess.run([sys.executable, str(AGENT), QUESTION], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "unused"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "The answer is 5."  # the tool's result came back through the official client
    (traj,) = proxy.take()  # the client's echo of the assistant turn (model_dump) continued it: no split
    assert "split" not in traj.metadata and traj.metadata["requests"] == 2
    samples = check_sampled_verbatim(traj, rec)
    assert [tpl.decode_turn(s.token_ids) for s in samples] == [CALL, "The answer is 5."]
    got, want = recompute_logprobs(py_caller.model, traj)
    assert got == pytest.approx(want, abs=2e-4)
    (s, e), = [(s, e) for s, e, m in segments(traj.loss_mask) if m == 0]
    assert py_caller.tokenizer.decode(traj.response_ids[s:e]).endswith(
        "<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")


def correct(completion: str) -> float:
    return float(completion.strip() == "The answer is 5.")


def test_the_jailed_script_reaches_the_proxy_and_scores(py_caller):
    need(jail_unavailable() is None, f"the jail cannot start here: {jail_unavailable()}")
    rec = RecordingSampler(py_caller)
    ep = asyncio.run(run_program_episode(rec, ChatTemplate(py_caller.tokenizer),
                                         [sys.executable, "/program/openai_agent.py", QUESTION], {"id": "t"},
                                         Rubric([correct], isolate=False), jail=str(AGENT), max_tokens=64,
                                         limits=ProgramLimits(timeout_s=120), params=GREEDY))
    assert ep.error is None and ep.status == 0 and ep.reward == 1.0, (ep.error, ep.stdout)
    (traj,) = ep.trajectories
    assert len(check_sampled_verbatim(traj, rec)) == 2 and traj.reward == 1.0


HOSTILE = r'''
import json, os, socket, sys, urllib.request
out = {"uid": os.getuid()}
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close(); out["host_port"] = "reached"
except OSError as exc:
    out["host_port"] = type(exc).__name__
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close(); out["internet"] = "reached"
except OSError as exc:
    out["internet"] = type(exc).__name__
for name, path in [("checkout", sys.argv[2]), ("home", os.path.expanduser("~root") + "/.bashrc"),
                   ("cache", sys.argv[3])]:
    out[name] = os.path.exists(path)
try:
    open("/run/toolgym-proxy/x", "w"); out["socket_dir"] = "written"
except OSError as exc:
    out["socket_dir"] = type(exc).__name__
with urllib.request.urlopen(os.environ["OPENAI_BASE_URL"] + "/models", timeout=10) as r:
    out["proxy"] = json.load(r)["data"][0]["id"]
out["task"] = json.loads(os.environ["TOOLGYM_TASK"])
print(json.dumps(out))
'''


def test_a_jailed_program_reaches_the_proxy_and_nothing_else(tiny, tmp_path):
    need(jail_unavailable() is None, f"the jail cannot start here: {jail_unavailable()}")
    from toolgym._assets.cache import cache_root

    prog = tmp_path / "hostile.py"
    prog.write_text(HOSTILE)
    server = socket.create_server(("127.0.0.1", 0))  # a service on this machine's loopback
    port = server.getsockname()[1]
    accepted: list = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        ep = asyncio.run(run_program_episode(
            tiny, ChatTemplate(tiny.tokenizer), [sys.executable, "/program/hostile.py", str(port),
                                                 str(ROOT / "pyproject.toml"), str(cache_root())],
            {"id": "t", "ground_truth": "secret"}, Rubric([lambda completion: 1.0], isolate=False),
            program_task={"id": "t"}, jail=str(prog), limits=ProgramLimits(timeout_s=60)))
    finally:
        server.close()
    assert ep.status == 0, ep.error
    seen = json.loads(ep.stdout)
    assert seen["uid"] == 65534
    assert seen["host_port"] == "ConnectionRefusedError" and not accepted  # its own loopback, not the host's
    assert seen["internet"] in ("OSError", "ConnectionRefusedError") and "reached" not in seen.values()
    assert not seen["checkout"] and not seen["home"] and not seen["cache"]
    assert seen["socket_dir"] in ("OSError", "PermissionError")
    assert seen["proxy"] == "toolgym"  # the one way out
    assert seen["task"] == {"id": "t"}  # the ground truth stays with the rubric


RUNAWAY = r'''
import subprocess, sys, time
# a child in a session of its own, out of the program's process group
subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(300)  # MARK"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(300)
'''


@pytest.mark.parametrize("jailed", [True, False], ids=["jail", "trusted"])
def test_a_program_over_its_time_is_killed_with_everything_it_started(tiny, tmp_path, jailed):
    if jailed:
        need(jail_unavailable() is None, f"the jail cannot start here: {jail_unavailable()}")
    else:
        need(os.geteuid() == 0, "a trusted program's cgroup needs root")
    mark = f"runaway-{tmp_path.name}"
    prog = tmp_path / "runaway.py"
    prog.write_text(RUNAWAY.replace("MARK", mark))
    cmd = [sys.executable, "/program/runaway.py" if jailed else str(prog)]
    ep = asyncio.run(run_program_episode(tiny, ChatTemplate(tiny.tokenizer), cmd, {}, Rubric([lambda completion: 1.0],
                                         isolate=False), jail=str(prog) if jailed else None,
                                         limits=ProgramLimits(timeout_s=3)))
    assert ep.reward == 0.0 and "ran over its limit of 3 s" in ep.error
    left = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True).stdout.split()
    for pid in left:  # this test's own leftovers, by id, so a failure leaves nothing running
        os.kill(int(pid), 9)
    assert left == [], "a process of the program outlived its episode"


def test_a_trusted_program_runs_under_a_memory_limit(tiny):
    hog = "x = bytearray(1 << 30); print('allocated')"
    ep = asyncio.run(run_program_episode(tiny, ChatTemplate(tiny.tokenizer), [sys.executable, "-c", hog], {},
                                         Rubric([lambda completion: 1.0], isolate=False),
                                         limits=ProgramLimits(memory_mb=256, timeout_s=30)))
    assert ep.status == 1 and "MemoryError" in ep.error and ep.reward == 0.0


class BrokenEngine(RecordingSampler):
    """A fault this test cannot cause for real: an engine that fails every request (a dead GPU)."""

    async def agenerate(self, prompts, params):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_whose_fault_a_failed_run_is(tiny):
    """A run that fails because the sampler failed it is masked (`error`); one that fails on its own scores 0."""
    rubric = Rubric([lambda completion: 1.0], isolate=False)
    tpl = ChatTemplate(tiny.tokenizer)
    ep = asyncio.run(run_program_episode(BrokenEngine(tiny), tpl, [sys.executable, str(AGENT), QUESTION], {},
                                         rubric, limits=ProgramLimits(timeout_s=120)))
    assert ep.status not in (0, None) and ep.finish_reason == "error" and ep.reward == 0.0  # the client gave up
    ep = asyncio.run(run_program_episode(tiny, tpl, [sys.executable, "-c", "raise SystemExit(3)"], {}, rubric))
    assert ep.status == 3 and ep.finish_reason == "program_error" and ep.reward == 0.0


def test_a_program_env_group_keeps_every_run_even_one_that_never_asked_the_model(tiny, tmp_path):
    """ProgramRunner, what a training run uses for toolgym/Program-v0: a group is group_size runs of the task; a
    run that never called the model is still a member (an empty trajectory with its outcome). Such a program is
    paid for printing the answer it was never given: the ground truth stays out of its reach (TOOLGYM_TASK)."""
    from toolgym.agents.program_episode import ProgramRunner
    from toolgym.agents.runner import TaskSpec
    from toolgym.agents.sampling import SamplingParams

    data = tmp_path / "tasks.jsonl"
    data.write_text('{"id": "add", "question": "What is 2 + 3?", "answer": "5"}\n')
    prog = tmp_path / "guess.py"
    prog.write_text("import json, os, sys\ntask = json.loads(os.environ['TOOLGYM_TASK'])\n"
                    "print(sorted(task), file=sys.stderr)\nprint('Answer: 5' if 'answer' not in str(task) else 'seen')\n")
    runner = ProgramRunner(tiny, ChatTemplate(tiny.tokenizer), "toolgym/Program-v0", SamplingParams(max_tokens=8),
                           None, env_kwargs={"program": str(prog), "dataset": str(data), "trusted": True})
    (group,) = runner.run([TaskSpec(seed=0, options={"index": 0}, index=7)], group_size=2)
    assert len(group) == 2
    for k, t in enumerate(group):
        assert (t.task_id, t.group_id, t.reward, t.finish_reason) == ("add", "toolgym/Program-v0/7", 1.0, "stop")
        assert t.response_ids == [] and t.prompt_ids and t.metadata["episode_index"] == k
        assert t.metadata["program_output"] == "Answer: 5\n" and t.metadata["trusted"] is True
