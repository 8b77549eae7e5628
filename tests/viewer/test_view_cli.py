"""`toolgym rollouts view`: the static page, the server on 127.0.0.1, and one-line errors."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess

import pytest
from typer.testing import CliRunner

from toolgym.agents.storage import write_jsonl
from toolgym.cli import app

from .cli_util import serving
from .files import TOOLGYM
from .test_index import _traj


def _get(port: int, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", host or f"127.0.0.1:{port}")
    conn.endheaders()
    res = conn.getresponse()
    out = (res.status, dict(res.getheaders()), res.read())
    conn.close()
    return out


def test_out_writes_one_page_beside_the_file_by_default(tmp_path):
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [_traj(i) for i in range(5)])
    res = CliRunner().invoke(app, ["rollouts", "view", str(path)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"wrote {tmp_path / 'run.html'}: 5 episodes"
    assert (tmp_path / "run.html").read_text().startswith("<!doctype html>")
    res = CliRunner().invoke(app, ["rollouts", "view", str(path), "--out", str(tmp_path / "p.html"), "--inline-mb", "0"])
    assert res.exit_code == 0 and "episode data in" in res.output and (tmp_path / "p_files").is_dir()
    res = CliRunner().invoke(app, ["rollouts", "view", str(path), "--out", str(tmp_path / "p.html"), "--json"])
    assert json.loads(res.output) == {"page": str(tmp_path / "p.html"), "data_dir": None, "chunks": 1, "episodes": 5}


def test_out_takes_a_folder_new_or_existing(tmp_path):
    path = tmp_path / "step-0003.jsonl"
    write_jsonl(path, [_traj(i) for i in range(3)])
    (tmp_path / "old").mkdir()
    for out in ("pages", "old", "nested/pages"):
        res = CliRunner().invoke(app, ["rollouts", "view", str(path), "--out", str(tmp_path / out)])
        assert res.exit_code == 0, res.output
        assert res.output.strip() == f"wrote {tmp_path / out / 'step-0003.html'}: 3 episodes"
        assert (tmp_path / out / "step-0003.html").read_text().startswith("<!doctype html>")
    (tmp_path / "notes").write_text("x")  # an existing file that is not a page is neither
    res = subprocess.run([TOOLGYM, "rollouts", "view", str(path), "--out", str(tmp_path / "notes")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.strip() == f"error: --out must name an .html file or a folder, got {tmp_path / 'notes'}"
    assert (tmp_path / "notes").read_text() == "x"


def test_server_answers_pages_of_episodes_on_loopback_only(tmp_path):
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [_traj(i, task_id=f"marker-{i}", turns=[{"role": "user", "content": f"turn-{i}"}])
                       for i in range(12)])
    with serving(path) as port:
        status, headers, body = _get(port, "/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "script-src 'nonce-" in headers["Content-Security-Policy"] and "connect-src 'self'" in body.decode()
        assert b"marker-11" in body and b"turn-11" not in body  # the index is in the page, the episodes are not
        status, headers, body = _get(port, "/api/episodes?ids=11,3")
        data = json.loads(body)
        assert status == 200 and headers["X-Content-Type-Options"] == "nosniff"
        assert [(e["i"], e["turns"][0]["content"]) for e in data["episodes"]] == [(11, "turn-11"), (3, "turn-3")]
        for bad in ("/api/episodes?ids=12", "/api/episodes?ids=x", "/api/episodes", "/api/episodes?ids=-1"):
            assert _get(port, bad)[0] == 400, bad
        assert _get(port, "/etc/passwd")[0] == 404
        assert _get(port, "/", host=f"localhost:{port}")[0] == 200
        # a page elsewhere that points a DNS name at 127.0.0.1 gets nothing
        assert _get(port, "/", host=f"evil.example:{port}")[0] == 403
        assert _get(port, "/api/episodes?ids=0", host="evil.example")[0] == 403


def test_server_listens_on_127_0_0_1_and_nothing_else(tmp_path):
    from toolgym.viewer.index import build_index
    from toolgym.viewer.server import ViewerServer

    path = tmp_path / "run.jsonl"
    write_jsonl(path, [_traj(0)])
    server = ViewerServer(build_index(path), None, port=0)
    try:
        assert server.server_address[0] == "127.0.0.1" and server.url.startswith("http://127.0.0.1:")
    finally:
        server.server_close()


def test_an_empty_file_gives_a_page_that_says_so(tmp_path):
    path = tmp_path / "empty.jsonl"
    write_jsonl(path, [])
    res = CliRunner().invoke(app, ["rollouts", "view", str(path)])
    assert res.exit_code == 0 and "0 episodes" in res.output
    assert '"total":0' in (tmp_path / "empty.html").read_text()


@pytest.mark.slow
def test_bad_input_is_one_line(tmp_path):
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [_traj(0)])
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    cases = [([str(tmp_path / "missing.jsonl")], "cannot read rollout file"),
             ([str(path), "--serve", "--port", str(taken.getsockname()[1])], "cannot listen on 127.0.0.1"),
             ([str(path), "--serve", "--out", str(tmp_path / "x.html")], "choose one"),
             ([str(path), "--out", str(tmp_path / "x.txt")], "must name an .html file or a folder")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("[1]\n")
    cases.append(([str(bad)], "bad.jsonl:1: expected a JSON object"))
    for args, message in cases:
        out = subprocess.run([TOOLGYM, "rollouts", "view", *args], capture_output=True, text=True)
        assert out.returncode != 0, args
        assert out.stderr.startswith("error:") and message in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    taken.close()
