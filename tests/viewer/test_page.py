"""The page's HTML and data (no browser here; tests/viewer/test_browser.py opens them in Chromium)."""

from __future__ import annotations

import json
import re

from toolgym.agents.storage import write_jsonl
from toolgym.viewer.index import build_index
from toolgym.viewer.page import asset, boot_data, json_for_html, render_page
from toolgym.viewer.static import write_static

from .files import HOSTILE
from .test_index import _traj


def test_json_for_html_cannot_close_a_script_block_and_round_trips():
    obj = {"texts": HOSTILE, "n": [1.5, None, -0.0]}
    text = json_for_html(obj)
    assert text.isascii() and not set("<>&") & set(text)
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == obj  # lone surrogates and all


def test_page_holds_data_only_as_inert_json(tmp_path):
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [], meta={"model": HOSTILE[0]})
    # written as escapes: the rollout writer cannot store a lone surrogate (HOSTILE has one), a hand-edited file can
    path.write_text("".join(json.dumps(_traj(i, turns=[{"role": "assistant", "content": h}]).to_dict()) + "\n"
                            for i, h in enumerate(HOSTILE)))
    index = build_index(path)
    page = render_page(boot_data(index, "inline", None), "NONCE123", server=False)
    # our three script elements (boot data, the script) and nothing a payload could have opened
    assert re.findall(r"<script[^>]*>", page) == ['<script type="application/json" id="tg-boot">',
                                                  '<script nonce="NONCE123">']
    assert page.count("</script>") == 2 and "<img" not in page and "<svg" not in page and "<iframe" not in page
    assert "script-src 'nonce-NONCE123'" in page and "connect-src 'none'" in page
    boot = json.loads(re.search(r'id="tg-boot">(.*?)</script>', page, re.S).group(1))
    assert boot["meta"]["model"] == HOSTILE[0] and boot["total"] == len(HOSTILE)


def test_script_never_turns_data_into_markup_or_code():
    js = asset("viewer.js")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(",
                 "setAttribute", ".href", "srcdoc", "</script"):
        assert sink not in js, sink


def test_static_page_inlines_small_files_and_chunks_big_ones(tmp_path):
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [_traj(i, task_id=f"marker-{i}") for i in range(40)])
    index = build_index(path, chunk_bytes=2000)
    small = write_static(index, tmp_path / "small.html", None)
    assert small.data_dir is None and "marker-7" in small.page.read_text()  # the index names every task
    html = small.page.read_text()
    assert html.count('type="application/json" id="tg-chunk-') == len(index.chunks) > 1

    big = write_static(index, tmp_path / "big.html", None, inline_limit=0)
    assert big.data_dir == tmp_path / "big_files"
    files = sorted(big.data_dir.iterdir())
    assert [f.name for f in files] == [f"chunk-{c:05d}.js" for c in range(len(index.chunks))]
    page = big.page.read_text()
    assert 'id="tg-chunk-' not in page and "a" * 200 not in page  # turns live in the chunks only
    seen = []
    for c, f in enumerate(files):
        text = f.read_text()
        assert text.startswith(f"tgChunk({c},") and text.endswith(");\n")
        seen += [e["i"] for e in json.loads(text[len(f"tgChunk({c},"):-3])["episodes"]]
    assert seen == list(range(40))
    # written again small enough to inline: the stale folder goes
    write_static(index, tmp_path / "big.html", None)
    assert not (tmp_path / "big_files").exists()
