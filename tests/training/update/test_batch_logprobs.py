import torch

from tests.training.tiny import tiny_lm
from toolgym.agents.trajectory import Trajectory
from toolgym.training.update.batch import collate
from toolgym.training.update.logprobs import response_logprobs


def _traj(prompt, resp, mask):
    return Trajectory(
        task_id="t", group_id="g", prompt_ids=prompt, response_ids=resp, loss_mask=mask,
        behavior_logprobs=[-0.5 if m else 0.0 for m in mask],
    )


def test_collate_aligns_response_region_and_masks():
    a = _traj([1, 2, 3], [4, 5, 6, 7], [1, 1, 0, 1])
    b = _traj([1], [8, 9], [1, 1])
    batch = collate([a, b], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7], [1, 8, 9, 0, 0, 0, 0]]
    assert batch.attention_mask.sum(1).tolist() == [7, 3]
    assert batch.loss_mask.tolist() == [[1, 1, 0, 1], [1, 1, 0, 0]]
    assert batch.rollout_logprobs[0].tolist() == [-0.5, -0.5, 0.0, -0.5]


def test_response_logprobs_match_unpadded_per_sequence_forward():
    model = tiny_lm()
    trajs = [_traj([1, 2, 3], [4, 5, 6, 7], [1, 1, 0, 1]), _traj([5], [8, 9], [1, 1]), _traj([7, 7], [3], [1])]
    batch = collate(trajs, pad_id=0)
    with torch.no_grad():
        lp, ent = response_logprobs(model, batch, with_entropy=True)
    for i, t in enumerate(trajs):
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].float()
        lsm = torch.log_softmax(logits, -1)
        p = len(t.prompt_ids)
        for j, tok in enumerate(t.response_ids):
            assert torch.allclose(lp[i, j], lsm[p + j - 1, tok], atol=1e-5)
            expected_entropy = -(lsm[p + j - 1].exp() * lsm[p + j - 1]).sum()
            assert torch.allclose(ent[i, j], expected_entropy, atol=1e-5)
        assert torch.all(lp[i, len(t.response_ids):] == 0)


def test_response_logprobs_carry_gradient_to_weights():
    model = tiny_lm()
    batch = collate([_traj([1, 2], [3, 4], [1, 1])])
    lp, _ = response_logprobs(model, batch)
    lp.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
