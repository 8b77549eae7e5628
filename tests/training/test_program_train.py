"""`toolgym train` trains an unmodified agent program: examples/openai_agent.py (the official `openai` client, one
tool, a plain loop) runs jailed against the recording proxy for every rollout of a YAML config, from a fresh folder
through the CLI. Its rollouts pass the token-alignment checks: every sampled run is what the sampler returned for
the ids before it, with its log-probs, and the trainer's own log-probs at the weights that sampled them give
importance ratio 1 (template and tool tokens outside the loss)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.agents.helpers import check_sampled_verbatim, segments
from toolgym.agents.program_jail import jail_unavailable

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openai_agent.yaml"


def small_config(tmp: Path) -> Path:
    """The example config as shipped, made small: fewer demonstrations, 2 steps of 2 prompts x 4 runs."""
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg["rollout"]["env_kwargs"]["program"] = str(ROOT / "examples" / "openai_agent.py")
    cfg.update(steps=2, output_dir="run")
    cfg["rollout"].update(group_size=4, prompts_per_step=2)
    cfg["rollout"]["env_kwargs"].update(max_concurrent=4, timeout_s=600)  # a loaded machine is no reason to fail
    cfg["sft"].update(demos=800, epochs=2, tool_fraction=0.9)  # most rollouts call the tool: multi-turn
    assert cfg["rollout"]["temperature"] == 1.0  # what the checks below assume
    cfg["logging"].update(plot=False, progress=False)
    cfg["eval"].update(every=0, at_start=False, tasks=4)  # the first sampling call is then step 1's
    path = tmp / "agent.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class Spy:
    """What the real sampler returned for each context (``check_sampled_verbatim`` reads ``calls``), and the
    weights it sampled the first step with (copied at its first call: the update changes them in place)."""

    def __init__(self) -> None:
        self.calls: dict[tuple[int, ...], list] = {}
        self.first_weights = None


@pytest.mark.slow  # SFT warm start + 2 steps of 8 jailed program runs, the viewer: ~1-2 min on the shared machine
def test_toolgym_train_trains_the_unmodified_openai_client_script(tmp_path, monkeypatch):
    import torch

    from tests.requirements import need

    need(jail_unavailable() is None, f"the jail cannot start here: {jail_unavailable()}")

    from toolgym.agents.hf_sampler import HFSampler
    from toolgym.agents.storage import read_jsonl
    from toolgym.cli import app
    from toolgym.training.batch import collate
    from toolgym.training.logging import read_metrics
    from toolgym.training.logprobs import response_logprobs

    spy = Spy()
    real = HFSampler.agenerate

    async def recording(self, prompts, params):
        if spy.first_weights is None:
            spy.first_weights = copy.deepcopy(self.model).eval()
        out = await real(self, prompts, params)
        for p, group in zip(prompts, out, strict=True):
            spy.calls.setdefault(tuple(p), []).extend(group)
        return out

    monkeypatch.setattr(HFSampler, "agenerate", recording)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["train", str(small_config(tmp_path))])
    assert res.exit_code == 0, res.output[-3000:]

    steps = [read_jsonl(tmp_path / "run" / "rollouts" / f"step-{s:04d}.jsonl") for s in (1, 2)]
    for trajs in steps:
        assert len(trajs) == 8 and {t.metadata["program"] for t in trajs} == {"openai_agent.py"}
        assert all(t.metadata["trusted"] is False and t.metadata["program_status"] == 0 for t in trajs)
        assert all("split" not in t.metadata for t in trajs)  # the client echoed each turn as it was sent
        for t in trajs:
            samples = check_sampled_verbatim(t, spy)
            assert len(samples) == t.metadata["requests"] >= 1
    # the program's tool calls made it multi-turn: template ids (tool result, next header) between sampled runs
    multi = [t for trajs in steps for t in trajs if t.metadata["requests"] > 1]
    assert multi, "no rollout called the tool"
    for t in multi:
        zero = [(s, e) for s, e, m in segments(t.loss_mask) if m == 0]
        assert len(zero) == t.metadata["requests"] - 1
        assert any(m["role"] == "tool" for m in t.turns)
    rewards = {t.reward for trajs in steps for t in trajs}
    assert rewards <= {0.0, 1.0}

    # the trainer's log-probs at the weights that sampled step 1: ratio 1 on every sampled token
    batch = collate(steps[0], pad_id=0)
    with torch.no_grad():
        logp, _ = response_logprobs(spy.first_weights, batch, temperature=1.0, head="full")
    mask = batch.loss_mask.bool()
    assert int(mask.sum()) == sum(t.num_model_tokens for t in steps[0]) > 0
    assert torch.allclose(logp[mask], batch.rollout_logprobs[mask], atol=2e-4)
    # and the trainer's own check, before each update
    gaps = [m["behaviour_gap_max"] for m in read_metrics(tmp_path / "run", "train")]
    assert len(gaps) == 2 and max(gaps) < 1e-4

    # the viewer on a step whose rollouts called the tool (the sampled text, so which step, varies with the CPU)
    shown = next(s for s in (2, 1) if any(m["role"] == "tool" for t in steps[s - 1] for m in t.turns))
    show_in_the_viewer(tmp_path / "run" / "rollouts" / f"step-{shown:04d}.jsonl", steps[shown - 1], tmp_path)


def show_in_the_viewer(step_file: Path, trajs: list, tmp_path: Path) -> None:
    """The program's rollouts in the viewer (headless Chromium), as any rollouts: every episode, the tool results
    the program sent back, the sampled tokens coloured; filtered to one task that called the tool. (The page's
    screenshot in docs/assets comes from the longer run there, by tests/viewer/screenshot.py.)"""
    from tests.requirements import need
    from tests.viewer.browser import Browser, chromium_path
    from tests.viewer.cli_util import view_out
    from tests.viewer.screenshot import READY

    need(chromium_path() is not None, "Chromium is not installed (scripts/setup.sh installs it)")
    html = tmp_path / "agent.html"
    view_out(step_file, html)
    with Browser(tmp_path / "browser") as browser:
        page = browser.open(html.as_uri())
        page.wait_for(READY, "the episodes to load")
        count = lambda sel: page.eval(f"document.querySelectorAll({sel!r}).length")  # noqa: E731
        assert count("#list .ep") == len(trajs)
        assert count(".tok.sampled") == sum(t.num_model_tokens for t in trajs)
        assert count(".role-tool") == sum(1 for t in trajs for m in t.turns if m.get("role") == "tool")
        # one task whose group has a tool call, one with a reward spread (coloured tokens) if any
        called = [t for t in trajs if any(m.get("role") == "tool" for m in t.turns)]
        spread = {t.task_id for t in trajs if t.metadata["train"]["advantage"] != 0}
        task = next((t.task_id for t in called if t.task_id in spread), called[0].task_id)
        n = int(page.eval("+document.getElementById('list').dataset.renders"))
        page.paste("#f-task", task)
        page.wait_for(f"+document.getElementById('list').dataset.renders > {n}", "the list to be drawn again")
        page.wait_for(READY, "the episodes to load")
        assert count(".role-tool") == sum(1 for t in trajs if t.task_id == task for m in t.turns if m.get("role") == "tool")
        assert page.screenshot(tmp_path / "agent.png", height=1300).stat().st_size > 0
        assert not page.exceptions() and not page.console()
