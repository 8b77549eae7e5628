"""Public path of MOPD's peer selection (``toolgym.training.mopd.select_peers``, a documented contract);
the implementation lives in :mod:`toolgym.training.algorithms.distillation.peers`."""

from toolgym.training.algorithms.distillation.peers import (
    PeerSelection,
    TeacherContext,
    batch_contexts,
    build_context,
    render_teacher_prompt_ids,
    select_peers,
)

__all__ = ["PeerSelection", "TeacherContext", "batch_contexts", "build_context", "render_teacher_prompt_ids",
           "select_peers"]
