"""The client a rollout worker builds on running servers: its router's list and the options it copies."""

from __future__ import annotations

import pytest

from toolgym.distributed.server_clients import client_options, rotated


def test_each_worker_starts_its_router_at_another_server():
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]
    firsts = [rotated(urls, slot)[0] for slot in range(4)]
    assert firsts == [urls[0], urls[1], urls[2], urls[0]]
    assert all(sorted(rotated(urls, slot)) == sorted(urls) for slot in range(4))  # every server, once


def test_client_options_copy_the_servers_settings_and_no_engine_options():
    class Started:  # what a VLLMServerSampler that started its servers exposes
        urls = ["http://127.0.0.1:7"]
        per_request_seeds = False
        max_model_len = 1024
        sampling_overrides = {"ignore_eos": True}
        timeout_s = 60.0
        max_concurrency = 8
        dtype = "float32"
        processes = ["a server process"]

    opts = client_options(Started())
    assert opts == {"urls": ["http://127.0.0.1:7"], "per_request_seeds": False, "max_model_len": 1024,
                    "sampling_overrides": {"ignore_eos": True}, "timeout_s": 60.0, "max_concurrency": 8}
    assert client_options(Started(), urls=["http://127.0.0.1:9"])["urls"] == ["http://127.0.0.1:9"]


def test_a_workers_client_routes_among_every_server_from_its_own_first():
    from toolgym.distributed.server_clients import build_client

    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    # built without reaching a server (max_model_len given): a worker starts before any request
    client = build_client({"urls": urls, "max_model_len": 512, "per_request_seeds": False}, slot=1)
    assert client.urls == [urls[1], urls[0]] and client.processes == [] and client.max_model_len == 512
    assert client.router.acquire("group-a") == 0 and client.router.acquire("group-a") == 0  # the group stays


@pytest.mark.slow  # two worker processes start: ~5 s
def test_a_pool_on_servers_holds_no_weights_and_only_learns_versions():
    """Worker processes of a pool that samples from servers start with no model at all (no config, no weights:
    a replica could not be built), a version label reaches every one, and weights are refused with a line that
    says where they go."""
    from transformers import AutoTokenizer

    from tests.agents.conftest import asset_dir
    from tests.requirements import need
    from toolgym.distributed.driver import RolloutPoolError
    from toolgym.distributed.local_pool import LocalRolloutPool

    path = asset_dir("smollm2-135m-instruct")
    need(path is not None, "the smollm2-135m-instruct asset (its tokenizer) is missing: run `toolgym assets fetch "
                           "smollm2-135m-instruct`")
    tok = AutoTokenizer.from_pretrained(path)
    with LocalRolloutPool(None, tok, num_workers=2, sandbox=None,
                          server={"urls": ["http://127.0.0.1:9"], "max_model_len": 512}) as pool:
        assert pool.label_version(3) == 3
        info = pool.worker_info()
        assert [i["version"] for i in info] == [3, 3] and len({i["pid"] for i in info}) == 2
        with pytest.raises(RolloutPoolError, match="weights go to the servers"):
            pool.push_weights({}, version=4)
        assert [i["version"] for i in pool.worker_info()] == [3, 3]
