"""The built-in environment classes (``toolgym/MathTIR-v0``, ``CodeContest-v0``, ``ScienceQA-v0``,
``ReasoningGym-v0``, ``Arith-v0``) and their helpers. Their tasks come from the task families of
:mod:`toolgym.envs.tasks` (Arith and ReasoningGym generate their own)."""
