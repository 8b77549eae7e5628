"""A small real OpenAI-compatible /v1/completions server on 127.0.0.1, backed by HFSampler, whose
faults are switched on per test: HTTP 500 answers, answers slower than the client's timeout, empty
completions. The faults are real HTTP behaviour seen by a real client, not mocks."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.sampling import SamplingParams


class CompletionServer:
    def __init__(self, sampler: HFSampler, model_name: str = "tiny") -> None:
        self.sampler = sampler
        self.model_name = model_name
        self.fail_first = 0  # answer HTTP 500 to this many requests
        self.always_fail = False
        self.delay_s = 0.0  # sleep before answering (client timeouts)
        self.empty = False  # answer with zero generated tokens
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                server.requests += 1
                if server.delay_s:
                    time.sleep(server.delay_s)
                if server.always_fail or server.requests <= server.fail_first:
                    return self._send(500, {"error": "injected server fault"})
                if self.path != "/v1/completions":
                    return self._send(404, {"error": "not found"})
                self._send(200, server.complete(body))

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False  # server_close() waits for handlers still generating
        self.httpd.block_on_close = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def complete(self, body: dict) -> dict:
        params = SamplingParams(n=body.get("n", 1), temperature=body.get("temperature", 1.0),
                                top_p=body.get("top_p", 1.0), top_k=body.get("top_k") or 0,
                                max_tokens=body.get("max_tokens", 16), stop=body.get("stop") or (),
                                stop_token_ids=body.get("stop_token_ids") or (), seed=body.get("seed"))
        samples = self.sampler.generate([body["prompt"]], params)[0]
        choices = []
        for i, s in enumerate(samples):
            ids, lps = ([], []) if self.empty else (s.token_ids, s.logprobs)
            choices.append({"index": i, "text": self.sampler.tokenizer.decode(ids), "token_ids": ids,
                            "finish_reason": s.finish_reason, "stop_reason": s.stop_reason,
                            "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": lps}})
        return {"id": "cmpl-test", "object": "text_completion", "model": self.model_name, "choices": choices}

    def __enter__(self) -> CompletionServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
