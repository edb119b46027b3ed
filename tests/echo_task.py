"""A task for control-flow tests with a scripted policy: answers are the content of the last \\boxed{}, correct
when equal to the problem's answer. Shared by the workflow, study-parser and study-update tests."""

from __future__ import annotations

from rolecast.tasks.base import Problem, Score, Task
from rolecast.workflows.parsing import last_boxed


class EchoTask(Task):
    name, family = "echo", "testbed"

    def extract_answer(self, text):
        return last_boxed(text)

    def score(self, problem, text):
        a = last_boxed(text)
        return Score(float(a == problem.reference), a)


PROBLEM = Problem("p0", "2 + 3", "5")
