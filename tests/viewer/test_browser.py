"""The viewer in a real headless Chromium (tests/viewer/browser.py): what a person sees, what their clicks and
keys change, and that hostile episodes run nothing. Screenshots are kept under each test's tmp path; with
TOOLGYM_SCREENSHOTS=DIR they are copied there too (docs/assets/ keeps the two the viewer's page shows)."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolgym.agents.storage import read_jsonl, write_meta

from ..requirements import need
from .browser import Browser, Page, chromium_path
from .cli_util import serving, view_out

pytestmark = pytest.mark.slow  # the session's real training step takes a minute or more on a shared CPU

READY = "document.getElementById('list').dataset.state === 'ready'"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    need(chromium_path() is not None, "Chromium is not installed (scripts/setup.sh installs it)")
    with Browser(tmp_path / "browser") as b:
        yield b


def keep(shot: Path, name: str) -> None:
    dest = os.environ.get("TOOLGYM_SCREENSHOTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(dest) / name)


def shown(page: Page) -> list[dict]:
    """The episode cards on screen: number, reward, task, finish reason."""
    return page.eval("[...document.querySelectorAll('#list .ep')].map(e => ({i: +e.dataset.i, reward: e.dataset.reward,"
                     " task: e.querySelector('.task').textContent, finish: e.querySelector('.finish').textContent}))")


def settle(page: Page, before: int | None = None) -> None:
    """Wait until the list is drawn again (after `before`, its render count then) and its episodes are in."""
    if before is not None:
        page.wait_for(f"+document.getElementById('list').dataset.renders > {before}", "the list to be drawn again")
    page.wait_for(READY, "the episodes to load")


def renders(page: Page) -> int:
    return int(page.eval("+document.getElementById('list').dataset.renders"))


def test_training_step_shows_turns_tools_and_token_colours(step_file, tmp_path, browser):
    trajs = read_jsonl(step_file)
    html = tmp_path / "step.html"
    view_out(step_file, html)
    page = browser.open(html.as_uri())
    settle(page)
    assert [c["i"] for c in shown(page)] == list(range(len(trajs)))  # 16 episodes: one page
    count = lambda sel: page.eval(f"document.querySelectorAll({json.dumps(sel)}).length")  # noqa: E731
    assert count(".tok") == sum(len(t.response_ids) for t in trajs)
    assert count(".tok.sampled") == sum(t.num_model_tokens for t in trajs)
    clipped = sum(len(p) for t in trajs for p in t.metadata["train"]["clip"].values())
    assert clipped > 0 and count(".tok.clip") == clipped
    # each call the environment ran (a tool result answers it) is set apart, read back from the assistant's text
    calls = sum(1 for t in trajs for m in t.turns if m.get("role") == "tool" and m.get("name") != "invalid_tool_call")
    assert calls > 0 and count(".call") == calls
    assert count(".role-tool") == sum(1 for t in trajs for m in t.turns if m.get("role") == "tool")
    # advantage colours: green for A > 0, red for A < 0, on each sampled token of the episode
    for i, t in enumerate(trajs):
        colours = page.eval(f"[...document.querySelectorAll('.ep[data-i=\"{i}\"] .tok.sampled')]"
                            ".map(s => getComputedStyle(s).backgroundColor)")
        want = "22, 163, 74" if t.metadata["train"]["advantage"] > 0 else "220, 38, 38"
        assert colours and all(want in c for c in colours), (i, colours[:3])
    # each kind of clip has its own box colour (the legend's)
    boxes = page.eval("[...document.querySelectorAll('.tok.clip')].map(s => [s.className.split('clip-')[1],"
                      " getComputedStyle(s).outlineColor, getComputedStyle(s).outlineStyle])")
    rgb = {"high": "rgb(234, 88, 12)", "low": "rgb(124, 58, 237)", "dual": "rgb(190, 18, 60)"}
    assert all(colour == rgb[kind] and style == "solid" for kind, colour, style in boxes), boxes[:5]
    tip = page.eval("document.querySelector('.tok.clip').title")
    assert "clipped (" in tip and "log-prob" in tip and "advantage" in tip
    # the screenshot: the task of the first episode the clip cut (the first mini-batch's groups have none)
    task = next(t.task_id for t in trajs if any(t.metadata["train"]["clip"].values()))
    n = renders(page)
    page.paste("#f-task", task)
    settle(page, n)
    assert {c["task"] for c in shown(page)} == {task} and count(".tok.clip") > 0
    shot = page.screenshot(tmp_path / "training-step.png", height=1500)
    keep(shot, "viewer_training_step.png")
    # colour by behaviour log-prob instead (the key a person presses on the focused choice)
    n = renders(page)
    page.press("#f-color", "ArrowDown", 40)
    settle(page, n)
    assert page.eval("document.getElementById('f-color').value") == "logp"
    i = int(shown(page)[0]["i"])
    alphas = page.eval(f"[...document.querySelectorAll('.ep[data-i=\"{i}\"] .tok.sampled')]"
                       ".map(s => getComputedStyle(s).backgroundColor)")
    logps = [lp for lp, m in zip(trajs[i].behavior_logprobs, trajs[i].loss_mask, strict=True) if m]
    assert len(alphas) == len(logps)
    for colour, lp in zip(alphas, logps, strict=True):  # darker blue for a less likely token
        assert colour.startswith("rgba(37, 99, 235, ")
        assert float(colour.split(",")[3].rstrip(")")) == pytest.approx(0.08 + 0.72 * (1 - math.exp(lp)), abs=0.01)
    assert not page.exceptions() and not page.console()


def test_filters_change_what_is_shown(step_file, browser):
    """Typing a minimum reward, a task id, and unticking a finish reason, as a person does, over the server."""
    trajs = read_jsonl(step_file)
    rewards = sorted(t.reward for t in trajs)
    gaps = [(b - a, (a + b) / 2) for a, b in zip(rewards, rewards[1:], strict=False)][3:-3]
    gap, threshold = max(gaps)
    assert gap > 1e-4  # SignalArith's rewards differ: a threshold between two of them splits the file
    with serving(step_file) as port:
        page = browser.open(f"http://127.0.0.1:{port}/")
        settle(page)
        assert len(shown(page)) == len(trajs)
        n = renders(page)
        page.type("#f-rmin", f"{threshold:.6f}")
        settle(page, n)
        after = shown(page)
        want = [i for i, t in enumerate(trajs) if t.reward >= threshold]
        assert [c["i"] for c in after] == want and 0 < len(want) < len(trajs)
        assert all(float(c["reward"]) >= threshold for c in after)
        assert page.eval("document.getElementById('count').textContent").startswith(f"{len(want)} of {len(trajs)} episodes")

        n = renders(page)
        page.click("#f-reset")
        settle(page, n)
        assert len(shown(page)) == len(trajs)
        task = trajs[-1].task_id
        n = renders(page)
        page.type("#f-task", task)
        settle(page, n)
        assert {c["task"] for c in shown(page)} == {task}
        assert [c["i"] for c in shown(page)] == [i for i, t in enumerate(trajs) if task in t.task_id]

        n = renders(page)
        page.click("#f-reset")
        settle(page, n)
        first = page.eval("document.querySelector('.f-finish-box').parentElement.textContent").split(" (")[0].strip()
        n = renders(page)
        page.click(".f-finish-box")
        settle(page, n)
        assert all(c["finish"] != first for c in shown(page))
        assert len(shown(page)) == sum(1 for t in trajs if t.finish_reason != first)
        assert not page.exceptions()


def test_pages_fetch_only_the_episodes_they_show(step_file, browser):
    trajs = read_jsonl(step_file)
    with serving(step_file, "--page-size", "5") as port:
        page = browser.open(f"http://127.0.0.1:{port}/")
        settle(page)
        assert [c["i"] for c in shown(page)] == [0, 1, 2, 3, 4]
        n = renders(page)
        page.click("#next")
        settle(page, n)
        assert [c["i"] for c in shown(page)] == [5, 6, 7, 8, 9]
        first_turn = page.eval("document.querySelector('.ep[data-i=\"5\"] .turn pre').textContent")
        assert first_turn == next(m["content"] for m in trajs[5].turns if m["role"] != "system")
        asked = [u.split("ids=")[1] for u in page.requests() if "/api/episodes" in u]
        assert asked == ["0,1,2,3,4", "5,6,7,8,9"]


@pytest.mark.parametrize("mode", ["inline", "files", "server"])
def test_hostile_episodes_run_nothing(hostile_file, mode, tmp_path, browser):
    """Every text field of a real rollout file's episodes replaced with markup and script (tests/viewer/files.py):
    it shows as text, no element or handler of it reaches the document, and nothing runs or is requested."""
    n_eps = len(read_jsonl(hostile_file))
    if mode == "server":
        ctx = serving(hostile_file)
        port = ctx.__enter__()
        url = f"http://127.0.0.1:{port}/"
    else:
        html = tmp_path / "hostile.html"
        view_out(hostile_file, html, *(["--inline-mb", "0"] if mode == "files" else []))
        url = html.as_uri()
    try:
        page = browser.open(url)
        settle(page)
        assert len(shown(page)) == n_eps
        page.click(".ep details.turn > summary")  # open a hostile system turn, as a reader would
        state = page.eval("""({pwned: typeof window.__pwned, title: document.title,
            foreign: [...document.querySelectorAll('img, svg, iframe, a, object, embed, base, form:not(#filters), ' +
                                                   'link, meta[http-equiv=refresh], body style')]
                       .map(e => e.outerHTML.slice(0, 80)),
            handlers: [...document.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name))
                        .filter(n => n.startsWith('on') || ['href', 'src', 'srcdoc', 'action'].includes(n)),
            scripts: [...document.scripts].map(s => s.type || s.nonce && 'ours' || s.outerHTML.slice(0, 80)),
            marks: [...document.querySelectorAll('.ctl')].map(e => e.textContent),
            text: document.body.textContent})""")
        assert state["pwned"] == "undefined"
        assert state["title"] == f"{hostile_file.name} \u00b7 toolgym rollouts"
        assert state["foreign"] == [] and state["handlers"] == []
        assert set(state["scripts"]) <= {"application/json", "ours"}
        for s in ("<script>window.__pwned = 1", "</script><script>", "<img src=", "javascript:window.__pwned",
                  "<svg onload=", "@@SCRIPT@@ @@BOOT@@ {{7*7}}", "\\u003cscript\\u003e"):
            assert s in state["text"], s
        for mark in ("U+202E", "U+202C", "U+200B", "U+200D", "U+FEFF", "U+2028", "U+2029", "U+E0041", "U+0000",
                     "U+D800"):
            assert f"\u27e8{mark}\u27e9" in state["marks"], mark
        requests = page.requests()
        assert requests and not [u for u in requests if "pwned" in u]
        if mode == "server":
            assert all(u.startswith(url) for u in requests), requests
        else:
            assert all(u.startswith("file://") for u in requests), requests
        assert not page.exceptions()
        assert not [m for m in page.console() if "Content Security Policy" in m or "Refused" in m]
        if mode == "inline":
            shot = page.screenshot(tmp_path / "hostile.png", height=1500)
            keep(shot, "viewer_hostile.png")
    finally:
        if mode == "server":
            ctx.__exit__(None, None, None)


def test_a_100_mb_file_opens_without_loading_it_whole(step_file, tmp_path, browser):
    """About 100 MB of real episodes (the training step's, repeated under new task ids): the static page holds
    the index only, and finding an episode near the end loads the one chunk that holds it."""
    big = tmp_path / "big.jsonl"
    records = [json.loads(line) for line in step_file.read_text().splitlines()]
    size, k = 0, 0
    with open(big, "w", encoding="utf-8") as fh:
        while size < 100 * 2**20:
            for r in records:
                line = json.dumps({**r, "task_id": f"copy{k}-{r['task_id']}", "group_id": f"copy{k}-{r['group_id']}"}) + "\n"
                fh.write(line)
                size += len(line.encode())
            k += 1
    write_meta(big, {"env_id": "copies of a training step"})
    shutil.copyfile(str(step_file) + ".tokens.json", str(big) + ".tokens.json")
    html = tmp_path / "big.html"
    printed = view_out(big, html, "--page-size", "200")
    chunks = sorted((tmp_path / "big_files").iterdir())
    assert "episode data in" in printed and len(chunks) > 50
    assert html.stat().st_size < size / 20  # the page: the index of every episode, no episode's turns
    page = browser.open(html.as_uri())
    settle(page)
    total = k * len(records)
    assert page.eval("document.getElementById('count').textContent").startswith(f"{total} of {total} episodes")
    n = renders(page)
    target = f"copy{k - 1}-{records[-1]['task_id']}"
    page.paste("#f-task", target)
    settle(page, n)
    assert {c["task"] for c in shown(page)} == {target}
    loaded = [u for u in page.requests() if "/big_files/" in u]
    assert loaded[0].endswith("chunk-00000.js") and len(loaded) == 2 and loaded[1].endswith(chunks[-1].name)
    # a page of 200 episodes spread over many chunks (the best reward of each copy): every one of them drawn
    top = max(r["reward"] for r in records)
    n = renders(page)
    page.click("#f-reset")
    settle(page, n)
    n = renders(page)
    page.paste("#f-rmin", repr(top))
    settle(page, n)
    cards = shown(page)
    assert len(cards) == 200 and all(float(c["reward"]) == top for c in cards)
    assert page.eval("document.querySelectorAll('.ep-body .chat').length") == 200
    assert len({u for u in page.requests() if "/big_files/" in u}) > 10
    assert not page.exceptions()
