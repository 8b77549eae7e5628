"""One resolver for model/tokenizer/dataset names: local path > toolgym asset > Hugging Face Hub id, and
ONE line (no traceback) when a Hub id cannot be had here. The offline cases run for real: HF_HUB_OFFLINE=1
(fast and deterministic), and an unresolvable HF_ENDPOINT for "no network" without the flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requirements import need
from toolgym._assets import names
from toolgym.assets import KNOWN_ASSETS, asset_path, load_records, resolve_model, resolve_name
from toolgym.errors import AssetError

CLI = [sys.executable, "-c", "from toolgym.cli import main; main()"]
NO_SUCH = "toolgym-tests/no-such-model"  # a Hub id no cache holds


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("https_proxy", "http_proxy", "all_proxy")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"), **extra)
    return env


def _cli(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("toolgym.assets: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


# ----------------------------------------------------------------------------- classification


@pytest.mark.parametrize(("name", "path_like"), [
    ("./model", True), ("/abs/model", True), ("~/m", True), ("runs/a/model", True), ("data.jsonl", True),
    ("x/y.json", True), ("Qwen/Qwen3-4B", False), ("HuggingFaceTB/SmolLM2-135M-Instruct", False),
    ("gsm8k", False),
])
def test_path_spellings(name: str, path_like: bool) -> None:
    assert names.looks_like_path(name) is path_like


def test_hub_id_spellings() -> None:
    assert names.split_hub_id("Qwen/Qwen3-4B") == ("Qwen/Qwen3-4B", None)
    assert names.split_hub_id("allenai/ai2_arc:ARC-Challenge") == ("allenai/ai2_arc", "ARC-Challenge")
    for bad in ("gsm8k", "a/b/c", "a--b/c", "a/b..c", "/x"):
        assert names.split_hub_id(bad) is None, bad


def test_existing_local_path_wins_even_when_spelled_like_a_hub_id(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "Qwen" / "Qwen3-4B").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = resolve_name("Qwen/Qwen3-4B")
    assert (r.source, r.ref) == ("local", "Qwen/Qwen3-4B")
    assert resolve_model("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"  # no Hub check for a local folder
    assert resolve_model(tmp_path / "Qwen") == str(tmp_path / "Qwen")


def test_asset_names_resolve_to_the_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGYM_HOME", str(tmp_path / "empty-cache"))
    with pytest.raises(AssetError, match=r"^asset 'smollm2-135m-instruct' is not fetched; run `toolgym assets fetch"):
        resolve_model("smollm2-135m-instruct")
    with pytest.raises(AssetError, match=r"^asset 'gsm8k' is a dataset, not a model"):
        resolve_model("gsm8k")
    with pytest.raises(AssetError, match=r"^asset 'smollm2-135m-instruct' is a model, not a dataset"):
        load_records("smollm2-135m-instruct")


def test_fetched_smollm2_asset_resolves_and_loads() -> None:
    try:
        folder = asset_path("smollm2-135m-instruct")
    except AssetError:
        need(False, "smollm2-135m-instruct is not fetched (toolgym assets fetch smollm2-135m-instruct)")
    assert resolve_model("smollm2-135m-instruct") == str(folder)
    assert resolve_model("smollm2-135m-instruct", "tokenizer") == str(folder)
    from toolgym.suites.models import load_causal_lm

    lm, tok = load_causal_lm("smollm2-135m-instruct", device="cpu")
    assert str(next(lm.parameters()).device) == "cpu" and tok.eos_token is not None


def test_unknown_bare_name_and_missing_path_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(AssetError, match=r"^unknown model 'gsm9k'; known: smollm2-135m-instruct, .*Hugging Face Hub id, owner/name"):
        resolve_model("gsm9k")
    with pytest.raises(AssetError, match=r"^no such file or folder: "):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(AssetError, match=r"^no such file or folder: "):
        load_records(str(tmp_path / "nope.jsonl"))


def test_offline_hub_id_is_one_actionable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AssetError) as info:
        resolve_model(NO_SUCH)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"model '{NO_SUCH}' is not a local folder or a toolgym asset, and the Hugging Face Hub is")
    assert f"hf download {NO_SUCH} --local-dir DIR" in msg and "--model DIR" in msg
    assert "toolgym assets list" in msg
    with pytest.raises(AssetError, match=r"--tokenizer DIR"):
        resolve_model(NO_SUCH, "tokenizer")


def test_hub_dataset_ids_go_to_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = resolve_name("allenai/ai2_arc:ARC-Challenge", "dataset")
    assert (r.source, r.ref, r.config) == ("hub", "allenai/ai2_arc", "ARC-Challenge")
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(AssetError, match=r"needs the `datasets` package \(pip install datasets\)"):
            load_records("toolgym-tests/no-such-dataset")
    else:
        with pytest.raises(AssetError, match=r"Hugging Face Hub is .*--repo-type dataset"):
            load_records("toolgym-tests/no-such-dataset")
    from toolgym.envs.sources import load_source

    with pytest.raises(AssetError, match="toolgym-tests/no-such-dataset"):  # envs take Hub ids the same way
        load_source("toolgym-tests/no-such-dataset")


def test_local_records_and_asset_records_still_load(tmp_path: Path) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text(json.dumps({"id": "a", "question": "1+1", "answer": "2"}) + "\n")
    assert load_records(str(f)) == [{"id": "a", "question": "1+1", "answer": "2"}]
    if "gsm8k" in KNOWN_ASSETS:
        try:
            asset_path("gsm8k")
        except AssetError:
            return
        assert len(load_records("gsm8k")) == 1319


def test_no_network_without_the_offline_flag_is_the_same_line_and_fast(tmp_path: Path) -> None:
    """No HF_HUB_OFFLINE: an endpoint that cannot resolve stands for "no internet" (it is what this
    machine has for huggingface.co); the answer comes without huggingface_hub's ~20 s of retries."""
    env = _env(tmp_path, HF_ENDPOINT="http://127.0.0.1:9")  # loopback only: nothing listens there
    del env["HF_HUB_OFFLINE"]
    code = ("from toolgym.assets import resolve_model\n"
            f"try:\n    resolve_model({NO_SUCH!r})\nexcept Exception as e:\n    print(type(e).__name__, e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.stdout.startswith(f"AssetError model '{NO_SUCH}' is not a local folder or a toolgym asset, "
                               "and the Hugging Face Hub is unreachable: download it where you have internet"), r


# ----------------------------------------------------------------------------- the commands


def test_rollout_with_offline_hub_id_is_one_line(tmp_path: Path) -> None:
    r = _cli("rollout", "toolgym/Arith-v0", "--model", NO_SUCH, "--out", str(tmp_path / "o.jsonl"),
             env=_env(tmp_path))
    line = _one_error_line(r)
    assert line.startswith(f"error: model '{NO_SUCH}' is not a local folder or a toolgym asset, and the Hugging Face Hub")
    assert f"hf download {NO_SUCH} --local-dir DIR" in line


def test_bench_with_offline_hub_id_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": "1+1?", "answer": "2"}) + "\n" for i in range(2)))
    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: s\nentries:\n  - name: m\n    env: toolgym/MathTIR-v0\n    source: 'asset:{data}'\n"
                     "    metric: pass@1\n    options: {dataset: gsm8k}\n")
    r = _cli("bench", str(suite), "--model", "Qwen/Qwen3-4B", "--out", str(tmp_path / "b"), env=_env(tmp_path))
    line = _one_error_line(r)
    assert line.startswith("error: model 'Qwen/Qwen3-4B' is not a local folder or a toolgym asset, and the Hugging Face Hub")


def test_train_and_sft_with_offline_hub_id_are_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model:\n  name_or_path: {NO_SUCH}\nrollout:\n  env: toolgym/Arith-v0\n"
                   f"sft:\n  demos: 8\noutput_dir: {tmp_path / 'run'}\n")
    r = _cli("train", str(cfg), env=_env(tmp_path))
    assert _one_error_line(r).startswith(f"error: model '{NO_SUCH}' is not a local folder or a toolgym asset")
    r = _cli("sft", str(cfg), "--out", str(tmp_path / "sft"), env=_env(tmp_path))
    assert _one_error_line(r).startswith(f"error: model '{NO_SUCH}' is not a local folder or a toolgym asset")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_analyze_with_offline_hub_id_is_one_line(tmp_path: Path) -> None:
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text("")
    r = _cli("analyze", "teacher-signal", str(rollouts), "--model", NO_SUCH, env=_env(tmp_path))
    assert _one_error_line(r).startswith(f"error: model '{NO_SUCH}' is not a local folder or a toolgym asset")
