"""LLMJudge as a rubric term: batching across episodes, caching by content, failures counted, backend faults
masked, cost recorded per episode and per process, and the event loop never blocked.

The backend here is a rule-based grader that speaks the JudgeBackend protocol (it reads the fenced fields
back out of the chat, as a model would see them): it exercises the term's mechanics without a model. The
same term on real models is tested in tests/agents/test_judge.py."""

from __future__ import annotations

import asyncio

import pytest

from toolgym.envs.judge import JudgeBackend, JudgeReply, LLMJudge, take_metrics
from toolgym.envs.rubric import Rubric
from toolgym.envs.types import Task
from toolgym.errors import ConfigError, InfrastructureError


def _field(user: str, label: str, nonce: str) -> str:
    body = user.split(f"<{label}-{nonce}>\n", 1)[1].split(f"\n</{label}-{nonce}>", 1)[0]
    return body.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


class RuleJudge:
    """Grades 10 when the answer contains the reference, else 2; answers starting with "reply:" get the rest
    as the reply verbatim (``{nonce}`` filled in), to drive the parser. Records each batch's size."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.batches: list[int] = []
        self.delay_s, self.fail = delay_s, fail

    async def ajudge(self, chats):
        self.batches.append(len(chats))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            raise ConnectionError("judge server refused the connection")
        out = []
        for chat in chats:
            nonce = chat[0]["content"].split("carry the id ", 1)[1].split(".", 1)[0]
            user = chat[1]["content"]
            answer, ref = _field(user, "answer", nonce), _field(user, "reference", nonce)
            if answer.startswith("reply:"):
                text = answer[len("reply:"):].replace("{nonce}", nonce)
            else:
                text = f"Looks {'right' if ref in answer else 'wrong'}.\nSCORE {nonce}: {10 if ref in answer else 2}"
            out.append(JudgeReply(text, prompt_tokens=len(user) // 4, completion_tokens=len(text) // 4))
        return out


TASK = Task(id="q", prompt=[{"role": "user", "content": "Capital of France?"}], ground_truth="Paris")


def _score_all(judge, answers, task=TASK):
    async def main():
        states = [{} for _ in answers]
        got = await asyncio.gather(*(Rubric([judge]).ascore(completion=a, answer=None, task=task, state=s, messages=[])
                                     for a, s in zip(answers, states, strict=True)))
        return got, states
    return asyncio.run(main())


def test_episodes_judged_together_share_one_backend_batch_and_score_in_unit_range():
    backend = RuleJudge()
    judge = LLMJudge(backend)
    results, _ = _score_all(judge, ["Paris.", "It is Paris", "Lyon", "Marseille"])
    assert backend.batches == [4]
    assert [r.components["judge"] for r in results] == [1.0, 1.0, 0.2, 0.2]
    assert isinstance(backend, JudgeBackend)


def test_batches_hold_at_most_batch_size_chats():
    backend = RuleJudge()
    _score_all(LLMJudge(backend, batch_size=3), [f"answer {i}" for i in range(7)])
    assert sorted(backend.batches) == [1, 3, 3]


def test_the_same_content_is_judged_once():
    backend = RuleJudge()
    judge = LLMJudge(backend)
    results, states = _score_all(judge, ["Paris", "Paris", "Lyon"])  # the two Paris at once: one call
    assert backend.batches == [2]
    assert [r.total for r in results] == [1.0, 1.0, 0.2]
    results, states2 = _score_all(judge, ["Lyon", "Paris"])  # later: both from the cache
    assert backend.batches == [2] and [r.total for r in results] == [0.2, 1.0]
    other = Task(id="q2", prompt=TASK.prompt, ground_truth="Lyon")  # another reference: judged anew
    results, _ = _score_all(judge, ["Lyon"], task=other)
    assert backend.batches == [2, 1] and results[0].total == 1.0
    st = judge.stats()
    assert (st.calls, st.cache_hits, st.batches) == (3, 3, 2)
    assert [s["info"]["llm_judge"]["cache_hits"] for s in states + states2] == [0, 1, 0, 1, 1]


def test_an_unparseable_verdict_scores_zero_is_counted_and_not_cached():
    backend = RuleJudge()
    judge = LLMJudge(backend)
    bad = ["reply:I think it is fine.", "reply:SCORE: 10", "reply:SCORE {nonce}: 12", "reply:" + "x" * 30_000]
    results, states = _score_all(judge, [*bad, "Paris"])
    assert [r.components["judge"] for r in results] == [0.0, 0.0, 0.0, 0.0, 1.0]
    for r in results[:4]:
        assert r.errors["judge"].startswith("JudgeVerdictError: judge ") and "\n" not in r.errors["judge"]
    assert [s["info"]["llm_judge"]["failures"] for s in states] == [1, 1, 1, 1, 0]
    assert all(s["info"]["llm_judge"]["prompt_tokens"] > 0 for s in states)  # a failed verdict cost tokens too
    assert judge.stats().failures == 4
    _score_all(judge, bad[:1])
    assert backend.batches == [5, 1]  # a failed verdict is asked again, not replayed from the cache
    assert judge.stats().failures == 5


def test_a_backend_fault_masks_the_episode_instead_of_scoring_it():
    judge = LLMJudge(RuleJudge(fail=True))
    with pytest.raises(InfrastructureError, match="judge backend failed: ConnectionError: judge server refused"):
        _score_all(judge, ["Paris"])
    assert judge.stats().backend_errors == 1


def test_cost_is_recorded_per_episode_and_per_process():
    take_metrics()  # start from zero
    judge = LLMJudge(RuleJudge(), name="grader")
    results, states = _score_all(judge, ["Paris", "Lyon", "Paris"])
    assert set(results[0].components) == {"grader"}
    for s in states:
        rec = s["info"]["llm_judge"]
        assert set(rec) == {"calls", "cache_hits", "failures", "prompt_tokens", "completion_tokens", "wait_s"}
        assert rec["calls"] + rec["cache_hits"] == 1 and rec["wait_s"] >= 0
    assert sum(s["info"]["llm_judge"]["prompt_tokens"] for s in states) > 0
    m = take_metrics()
    assert m["judge/calls"] == 2 and m["judge/cache_hits"] == 1 and m["judge/batches"] == 1
    assert m["judge/prompt_tokens"] == sum(s["info"]["llm_judge"]["prompt_tokens"] for s in states)
    assert take_metrics() == {}  # reset: the next step starts at zero


def test_judging_never_blocks_the_event_loop():
    """The backend's reply waits for another coroutine on the same loop: the verdict can only come if judging
    leaves the loop free (a blocking judge would hang here until the bound)."""
    class GatedJudge(RuleJudge):
        def __init__(self):
            super().__init__()
            self.gate = asyncio.Event()

        async def ajudge(self, chats):
            await self.gate.wait()
            return await super().ajudge(chats)

    backend = GatedJudge()
    judge = LLMJudge(backend)
    ticks: list[int] = []

    async def main():
        async def tick():
            for i in range(3):
                ticks.append(i)
                await asyncio.sleep(0.01)
            backend.gate.set()
        t = asyncio.ensure_future(tick())
        score = await asyncio.wait_for(judge(completion="Paris", task=TASK, state={}), 30)
        await t
        return score

    assert asyncio.run(main()) == 1.0 and ticks == [0, 1, 2]


def test_the_judge_grades_the_detected_answer_when_asked():
    backend = RuleJudge()
    res = Rubric([LLMJudge(backend, field="answer")]).score(completion="Paris Paris", answer="Lyon", task=TASK)
    assert res.total == 0.2


@pytest.mark.parametrize("kwargs", [{"field": "text"}, {"max_score": 0}, {"batch_size": 0}])
def test_bad_settings_are_one_clear_line(kwargs):
    with pytest.raises(ConfigError):
        LLMJudge(RuleJudge(), **kwargs)
    with pytest.raises(ConfigError, match="ajudge"):
        LLMJudge(object())


def test_the_wait_for_a_verdict_is_not_the_episodes_own_time():
    """The runner leaves waits out of `max_wall_s`: a judge's batch is the judge's time, not the episode's."""
    from toolgym.sandbox import waiting

    clock = waiting.WaitClock()

    async def main():
        with waiting.measuring(clock):
            return await asyncio.ensure_future(LLMJudge(RuleJudge(delay_s=0.3))(completion="Paris", task=TASK))

    assert asyncio.run(main()) == 1.0
    assert clock.seconds >= 0.3


def test_a_judge_that_never_answers_is_a_backend_fault_at_its_bound():
    class Silent(RuleJudge):
        async def ajudge(self, chats):
            await asyncio.Event().wait()

    judge = LLMJudge(Silent(), timeout_s=0.2)
    with pytest.raises(InfrastructureError, match="no verdict in 0.2 s"):
        _score_all(judge, ["Paris"])
