"""The client a rollout worker builds on running servers: its router's list and the options it copies."""

from __future__ import annotations

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
