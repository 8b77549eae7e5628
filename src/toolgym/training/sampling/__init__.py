"""What the rollout side gets from the trainer: the current weights (:mod:`.policy_sync`, in a checkpoint's
layout: :mod:`.checkpoint_format`) and each step's draw of environments (:mod:`.mixture`). The orchestrator
and the staleness pipeline that use them are :mod:`toolgym.training.orchestrator` and
:mod:`toolgym.training.pipeline`."""
