"""Run under torchrun (2 CPU gloo ranks, TOOLGYM_PARALLEL=fsdp): one whole training step with the shared-module
`hf` sampler (rollouts, update, evaluations before and after), then each rank writes how many decoding forwards
it ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.training.trainer_util import tiny_config  # noqa: E402
from toolgym.training.config import load_config  # noqa: E402
from toolgym.training.orchestrator import Orchestrator  # noqa: E402
from toolgym.training.trainer import Trainer  # noqa: E402

out = Path(sys.argv[1])


class CountingOrchestrator(Orchestrator):
    """Counts the module's forwards while the sampler decodes (rollouts and evaluations); rank 1 samples at most
    4 tokens a turn, rank 0 up to 16, so the ranks run different numbers of forwards (which batching and EOS
    alone do only now and then)."""

    decode_forwards = 0

    def runner(self, *args, **kwargs):
        runner = super().runner(*args, **kwargs)
        if self.dist.rank == 1:
            runner.params = runner.params.with_(max_tokens=4)
        return runner

    def decoding(self):
        import contextlib

        inner = super().decoding()

        @contextlib.contextmanager
        def counted():
            def hook(*_):
                self.decode_forwards += 1

            handle = self.module.register_forward_pre_hook(hook)
            try:
                with inner:
                    yield
            finally:
                handle.remove()

        return counted()


class CountingTrainer(Trainer):
    def _build_rollouts(self):
        self.orchestrator = CountingOrchestrator(self.cfg, module=self.module, tokenizer=self.tokenizer,
                                                 template=self.template, dist=self.dist, out=self.out,
                                                 sampler_spec=self.sampler_spec, say=self.logger.say)
        self.orchestrator.start()


# SFT warm start: some answers end at EOS, some run to the token limit
cfg = tiny_config(out, steps=1, sft={"enabled": True, "demos": 32, "epochs": 4, "lr": 3e-3, "batch_size": 8,
                                     "max_seq_len": 64, "tool_fraction": 0.5, "direct_correct": 0.5})
cfg["rollout"].update(prompts_per_step=4, max_new_tokens=16)
cfg["rollout"]["env_kwargs"]["ops"] = "+"
cfg["eval"].update(every=1, tasks=4, at_start=True)
tr = CountingTrainer(load_config(cfg), console=False)
tr.fit()
(out / f"rank{tr.dist.rank}.json").write_text(json.dumps({
    "decode_forwards": tr.orchestrator.decode_forwards, "sharded": type(next(iter(tr.module.state_dict().values()))).__name__}))
print(f"rank {tr.dist.rank} done", flush=True)
