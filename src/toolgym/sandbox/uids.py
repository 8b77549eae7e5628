"""The host uids of one sandbox: each gets four of its own (its programs', its evaluator's and their
cleaners'), so that the host kernel's per-uid counts (inotify instances, message-queue bytes, pipe pages,
processes) are never shared by two sandboxes: shared, they carried an answer between programs judged
at the same time (red team round 5, x04). Neither backend remaps uids, so the sandbox's uids are the
host's; they are drawn at random far above any login uid (about 1 in 260 million that two live
sandboxes share a block).
"""

from __future__ import annotations

import secrets

FIRST, LAST = 1 << 24, 1 << 30  # far above login uids, and below 2**31 (which some tools read as negative)


def new_base() -> int:
    """The first of four consecutive uids for one sandbox (the executor's TG_UID_BASE)."""
    return FIRST + 4 * secrets.randbelow((LAST - FIRST) // 4)
