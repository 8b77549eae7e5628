"""toolgym._stop with real signals delivered to this process: SIGINT and SIGTERM become Stopped (exit code 128 +
the signal), a held section finishes before the signal is raised, a released stretch inside it is cut at once,
and the handlers in place before are back afterwards."""

from __future__ import annotations

import signal

import pytest

from toolgym._stop import Stopped, held, released, signals


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_becomes_stopped_with_the_shells_exit_code(signum: int) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(Stopped) as info, signals():
        signal.raise_signal(signum)
    assert info.value.exit_code == 128 + signum and info.value.name == signal.Signals(signum).name
    assert isinstance(info.value, KeyboardInterrupt)  # code that keeps its work on Ctrl-C keeps it here too
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_held_work_finishes_and_released_work_is_cut() -> None:
    done = []
    with pytest.raises(Stopped) as info, signals():
        with held():
            signal.raise_signal(signal.SIGTERM)
            done.append("update")  # the signal waits for the section to end
        done.append("after")
    assert done == ["update"] and info.value.signum == signal.SIGTERM

    done.clear()
    with pytest.raises(Stopped), signals(), held():
        with released():
            signal.raise_signal(signal.SIGINT)
            done.append("sampling")
    assert done == []

    done.clear()
    with pytest.raises(Stopped), signals(), held():  # pending from the held part: raised on entering released
        signal.raise_signal(signal.SIGINT)
        done.append("update")
        with released():
            done.append("sampling")
    assert done == ["update"]
