"""The parts of the ``vllm_server`` sampler that need no server: the router's choices, reading the server's
version spans and answers, the loopback rule, ``vllm serve`` flags, the registry entry, and the weight folders
a killed trainer leaves behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolgym.agents.samplers import get_sampler, register_sampler
from toolgym.agents.sampling import SamplingParams
from toolgym.agents.server_router import Router
from toolgym.agents.server_sampler import parse, versions_per_token
from toolgym.agents.vllm_server import check_loopback, cpu_shares, engine_args
from toolgym.errors import ConfigError


def test_router_pins_a_group_and_sends_new_groups_to_the_least_loaded():
    r = Router(["a", "b", "c"])
    first = r.acquire("g1")
    assert first == 0  # all idle: the first server
    assert r.acquire("g2") == 1 and r.acquire("g3") == 2  # each new group where fewest are outstanding
    assert r.acquire("g1") == 0 and r.acquire("g1") == 0  # the group stays, however loaded its server is
    assert r.outstanding == [3, 1, 1]
    r.release(1)
    assert r.acquire("g4") == 1  # b has none outstanding now
    assert r.acquire(None) == 2  # a request without a group: the least loaded (c: 1, fewer served than b)
    assert r.server_of("g1") == 0 and r.server_of("nope") is None


def test_router_forgets_its_oldest_groups():
    r = Router(["a", "b"], remember=2)
    for g in ("x", "y", "z"):
        r.release(r.acquire(g))
    assert r.server_of("x") is None and r.server_of("y") is not None and r.server_of("z") is not None
    with pytest.raises(ValueError):
        Router([])


def test_version_spans_become_one_version_per_token():
    spans = [{"version": "3", "start": 0, "end": 2}, {"version": "4", "start": 2, "end": 5}]
    assert versions_per_token(spans, 5) == [3, 3, 4, 4, 4]
    assert versions_per_token(spans[::-1], 5) == [3, 3, 4, 4, 4]  # in token order whatever the list's order
    assert versions_per_token([{"version": "default", "start": 0, "end": 5}], 5) is None  # not a policy version
    assert versions_per_token(spans, 6) is None  # spans that do not cover the output
    assert versions_per_token([{"version": "1", "start": 1, "end": 5}], 4) is None  # a gap
    assert versions_per_token(None, 3) is None


def _answer(ids, lps, spans=None, finish="stop"):
    return {"choices": [{"index": 0, "finish_reason": finish, "token_ids": ids, "weight_versions": spans,
                         "logprobs": {"content": [{"token_id": t, "logprob": lp} for t, lp in zip(ids, lps, strict=True)]}}]}


def test_an_answer_becomes_samples_with_versions():
    (s,) = parse(_answer([5, 6, 7], [-0.5, -1.0, -2.0], [{"version": "2", "start": 0, "end": 3}], "length"),
                 SamplingParams(temperature=0.7))
    assert s.token_ids == [5, 6, 7] and s.logprobs == [-0.5, -1.0, -2.0] and s.token_versions == [2, 2, 2]
    assert s.finish_reason == "length" and s.logprob_kind == "processed"
    bad = _answer([5, 6], [-0.5, -1.0])
    bad["choices"][0]["logprobs"]["content"][1]["token_id"] = 9  # a log-prob of another token
    with pytest.raises(ValueError, match="differ"):
        parse(bad, SamplingParams())
    with pytest.raises(ValueError, match="asked for 2"):
        parse(_answer([5], [-0.1]), SamplingParams(n=2))


def test_only_servers_on_this_machine_are_accepted():
    assert check_loopback("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert check_loopback("http://localhost:8000") == "http://localhost:8000"
    with pytest.raises(ConfigError, match="only a server on this machine"):
        check_loopback("http://10.0.0.5:8000")


def test_engine_options_become_vllm_serve_flags():
    assert engine_args({"max_model_len": 1024, "enforce_eager": True, "enable_prefix_caching": False,
                        "tokenizer": None, "dtype": "float32"}) == [
        "--max-model-len", "1024", "--enforce-eager", "--dtype", "float32"]


def test_the_registry_entry_takes_pushes_while_it_samples():
    spec = get_sampler("vllm_server")
    assert spec.needs_weight_push and spec.pushes_while_sampling and spec.follows_training and not spec.remote
    with pytest.raises(ConfigError, match="needs needs_weight_push"):
        register_sampler("odd", "x:y", pushes_while_sampling=True)


def test_weight_folders_of_a_killed_trainer_are_removed_and_no_others(tmp_path):
    import os
    import subprocess
    import sys

    from toolgym.agents.weight_transport import STAGE_PREFIX, drop_orphans, new_weight_folder

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs (as after kill -9)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {"dead": f"{STAGE_PREFIX}{gone.pid}-ab12cd", "mine": f"{STAGE_PREFIX}{os.getpid()}-x1",
                 "alive": f"{STAGE_PREFIX}{alive.pid}-y2", "no pid": f"{STAGE_PREFIX}12345678",
                 "other": "unrelated-1-2"}
        for name in names.values():
            (tmp_path / name).mkdir()
            (tmp_path / name / "model.safetensors").write_bytes(b"x")
        drop_orphans(str(tmp_path))
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k != "dead")
        # every push (a server's or the in-process engine's) takes its folder this way: named with its pid,
        # after the dead writers' folders are gone
        (tmp_path / names["dead"]).mkdir()
        folder = Path(new_weight_folder(str(tmp_path)))
        assert folder.parent == tmp_path and folder.name.startswith(f"{STAGE_PREFIX}{os.getpid()}-")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [folder.name, *(v for k, v in names.items() if k != "dead")])
    finally:
        alive.kill()
        alive.wait()


def test_cpu_servers_get_disjoint_core_lists_or_vllms_own_choice():
    cores = os.sched_getaffinity(0)
    assert cpu_shares(1) == [None]
    assert cpu_shares(len(cores) + 1) == [None] * (len(cores) + 1)  # fewer cores than servers: vLLM chooses
    if len(cores) >= 2:
        lists = [{int(c) for c in s.split(",")} for s in cpu_shares(2)]
        assert lists[0] and lists[1] and not lists[0] & lists[1] and lists[0] | lists[1] <= cores
        assert len(lists[0]) == len(lists[1]) == len(cores) // 2


def test_a_core_list_per_server_or_one_line():
    """A list that does not match the servers would start another number of servers than asked: refused before
    any starts (no vLLM is needed to reach the check)."""
    from toolgym.agents.server_sampler import VLLMServerSampler

    with pytest.raises(ConfigError, match=r"cpus: one core list per server \(2\); got 1"):
        VLLMServerSampler("smollm2-135m-instruct", servers=2, cpus=["0"])
