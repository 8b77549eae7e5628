"""Samplers as plug-ins: a third-party package registers samplers through the entry-point group
``toolgym.samplers`` (a dist-info folder on sys.path, as pip would install it) and they are selectable from a
training YAML, ``toolgym rollout --sampler`` and a suite run; their capability flags, not their names, decide
whether the trainer pushes weights to them.

The plug-in's samplers are real: transformers replicas (``HFSampler`` on a model folder of their own) that
count the weight pushes they take."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.agents import samplers
from toolgym.errors import ConfigError

PLUGIN = '''
from toolgym.agents.samplers import SamplerSpec, register_sampler

# an engine with its own copy of the policy: the trainer must push weights to it
REPLICA = SamplerSpec("replica_test", "toolgym_sampler_plugin.impl:replica", needs_weight_push=True,
                      description="a transformers replica that takes weight pushes")


def register():
    """A hook entry point: registers a sampler that has update_weights but is flagged as frozen."""
    register_sampler("frozen_test", "toolgym_sampler_plugin.impl:frozen", description="a replica never updated")
'''

IMPL = '''
from toolgym.agents.hf_sampler import HFSampler

BUILT = []


class Replica(HFSampler):
    name = "replica_test"

    def __init__(self, model, **options):
        super().__init__(model, **options)
        self.pushes = 0
        BUILT.append(self)

    def update_weights(self, state_dict):
        self.pushes += 1
        super().update_weights(state_dict)


def replica(model, *, seed=0, max_model_len=None, **options):
    return Replica(model, **options)


def frozen(model, *, seed=0, folder, **options):
    """Loads the folder it is given (rollout.sampler_kwargs.folder), whatever the trainer's model is."""
    return Replica(folder, **options)
'''


@pytest.fixture
def plugin_site(tmp_path: Path):
    site = tmp_path / "site"
    pkg = site / "toolgym_sampler_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PLUGIN)
    (pkg / "impl.py").write_text(IMPL)
    dist = site / "toolgym_sampler_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toolgym-sampler-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[toolgym.samplers]\nreplica_test = toolgym_sampler_plugin:REPLICA\n"
                                           "hook = toolgym_sampler_plugin:register\n")
    sys.path.insert(0, str(site))
    try:
        samplers.load_plugins(force=True)
        yield site
    finally:
        sys.path.remove(str(site))
        for name in ("replica_test", "frozen_test"):
            samplers.SAMPLERS.pop(name, None)
        for mod in [m for m in sys.modules if m.startswith("toolgym_sampler_plugin")]:
            del sys.modules[mod]
        samplers.plugin_errors.clear()


def _tiny(out: Path, **rollout):
    from tests.training.trainer_util import tiny_config

    data = tiny_config(out, steps=1, sft__enabled=False)
    data["rollout"].update(sandbox=None, **rollout)
    return data


def test_entry_points_register_samplers_with_their_flags(plugin_site: Path) -> None:
    assert samplers.list_samplers()[:3] == ["hf", "vllm", "openai"]
    replica, frozen = samplers.get_sampler("replica_test"), samplers.get_sampler("frozen_test")
    assert replica.needs_weight_push and not replica.in_process and replica.follows_training
    assert not frozen.follows_training
    with pytest.raises(ConfigError, match=r"^unknown sampler 'replika_test'; did you mean 'replica_test'\? known: hf, "
                                          r"vllm, openai, vllm_server, replica_test, frozen_test \(from --sampler\)$"):
        samplers.get_sampler("replika_test")


@pytest.mark.slow
def test_a_plugin_sampler_trains_from_yaml_and_takes_the_weight_pushes(plugin_site: Path, tmp_path: Path) -> None:
    import torch
    import yaml

    from toolgym.training.config import load_config
    from toolgym.training.trainer import Trainer

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(_tiny(tmp_path / "run", sampler="replica_test")))
    cfg = load_config(path)
    assert cfg.rollout.sampler == "replica_test"
    tr = Trainer(cfg, console=False)
    tr.fit()
    impl = sys.modules["toolgym_sampler_plugin.impl"]
    (sampler,) = impl.BUILT
    orch = tr.orchestrator
    assert orch.sampler is sampler and orch.policy_sync.copies_weights
    # before the first rollouts, and after the update
    assert sampler.pushes == orch.policy_sync.pushes >= 2
    trained = tr.module.state_dict()
    for name, value in sampler.model.state_dict().items():
        assert torch.equal(value, trained[name]), name


def test_a_frozen_plugin_sampler_gets_no_push_although_it_could_take_one(plugin_site: Path, tmp_path: Path) -> None:
    from toolgym.training.config import load_config
    from toolgym.training.trainer import Trainer

    with pytest.raises(ConfigError, match=r"rollout.sampler=frozen_test cannot receive weight updates during "
                                          r"training .*use sampler: hf or vllm or vllm_server or replica_test"):
        load_config(_tiny(tmp_path / "a", sampler="frozen_test"))
    first = Trainer(load_config(_tiny(tmp_path / "a")), console=False)
    first.build()  # writes the demo model's folder for the frozen sampler to load
    folder = str(tmp_path / "a" / "demo-model")
    cfg = load_config(_tiny(tmp_path / "b", sampler="frozen_test", frozen_policy_ok=True,
                            sampler_kwargs={"folder": folder}))
    tr = Trainer(cfg, console=False)
    with pytest.warns(UserWarning, match="rollout.sampler=frozen_test: the sampler gets no weight updates"):
        tr.build(rollouts=True)
    orch = tr.orchestrator
    assert hasattr(orch.sampler, "update_weights") and not orch.policy_sync.copies_weights
    orch.publish(0)
    assert orch.sampler.pushes == 0 and orch.policy_sync.pushes == 0


@pytest.mark.slow
def test_a_plugin_sampler_from_the_cli_and_a_suite_run(plugin_site: Path, tmp_path: Path) -> None:
    from toolgym.suites.runner import BenchConfig, make_sampler
    from toolgym.training.config import load_config
    from toolgym.training.trainer import Trainer

    Trainer(load_config(_tiny(tmp_path / "run")), console=False).build()
    folder = tmp_path / "run" / "demo-model"
    out = tmp_path / "r.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_site), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", "from toolgym.cli import main; main()", "rollout", "toolgym/Arith-v0",
                           "--model", str(folder), "--sampler", "replica_test", "--tasks", "1", "--group", "2",
                           "--max-tokens", "4", "--max-turns", "1", "--out", str(out), "--json", "--no-progress",
                           "-k", "min_digits=1", "-k", "max_digits=1"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads(Path(f"{out}.meta.json").read_text())["meta"]
    assert meta["sampler"] == "replica_test" and meta["complete"] and meta["episodes"] == 2
    assert len(out.read_text().splitlines()) == 2  # the two episodes
    bad = subprocess.run([sys.executable, "-c", "from toolgym.cli import main; main()", "rollout", "toolgym/Arith-v0",
                          "--model", str(folder), "--sampler", "replica_tset", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert bad.returncode == 2 and "did you mean 'replica_test'" in bad.stderr
    sampler, _ = make_sampler(BenchConfig(suite="math", model=str(folder), sampler="replica_test"))
    try:
        assert isinstance(sampler, sys.modules["toolgym_sampler_plugin.impl"].Replica)
    finally:
        sampler.close()
