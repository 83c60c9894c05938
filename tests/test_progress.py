"""The progress line's bar and time left follow what the plan expects, not the most it may spend."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

from tunecache.progress import ProgressPrinter

LEFT = re.compile(r"\[([#.]+)\] .* (\d+)/(\d+) trials?, .* elapsed, ~(\S+) left")


def _parse(line: str) -> tuple[int, int, int, str]:
    """``(bar cells filled, trials, most trials, time left)`` of a progress line."""
    m = LEFT.search(line)
    assert m, line
    return m.group(1).count("#"), int(m.group(2)), int(m.group(3)), m.group(4)


def _printer() -> ProgressPrinter:
    return ProgressPrinter("warm", stream=io.StringIO())


def test_a_plan_of_narrowed_searches_is_timed_by_its_expected_trials_not_its_most() -> None:
    """A zoo warm spent 2,467 of at most 11,279 trials in 17 minutes while its line said ~61m
    left: narrowed searches may escalate to a full search's budget, few do."""
    p = _printer()
    # Four narrowed searches expected to spend 10 trials each, each allowed 100.
    p.start(4, 400, {"a": 10, "b": 10, "c": 10, "d": 10})
    p(SimpleNamespace(total_trials=10, task_name="a#1"))
    p.step(SimpleNamespace(node="a", name="a", outcome="reused", trials=10))
    filled, trials, most, left = _parse(p.line(10, 60.0))
    assert (trials, most) == (10, 400)  # the line still says the most the plan may spend
    assert left == "3m00s" and filled == 5  # 30 trials to go at 6 s a trial; a quarter done

    # Without the steps' expectations: 390 trials to go at 6 s each.
    q = _printer()
    q.start(4, 400)
    q(SimpleNamespace(total_trials=10, task_name="a#1"))
    assert _parse(q.line(10, 60.0))[3] == "39m00s"


def test_the_steps_in_flight_count_against_the_unfinished_steps_expectations() -> None:
    """Steps run in plan order (the ready full searches together): the trials of those in flight
    are charged to the unfinished steps. A step that spends past its expectation (a narrowed
    search escalated) shortens the estimate until it finishes, never below nothing."""
    p = _printer()
    p.start(3, 300, {"a": 10, "b": 30, "c": 10})
    p(SimpleNamespace(total_trials=10, task_name="a"))
    p.step(SimpleNamespace(node="a", name="a", outcome="tuned", trials=10))
    p(SimpleNamespace(total_trials=35, task_name="b"))  # b in flight: 25 of its 30 spent
    assert _parse(p.line(35, 70.0))[3] == "30.0s"  # b's 5 and c's 10 at 2 s a trial
    p(SimpleNamespace(total_trials=60, task_name="b"))  # b escalated: 50 spent
    assert _parse(p.line(60, 120.0))[3] == "0.0s"
    p.step(SimpleNamespace(node="b", name="b", outcome="reused", trials=50))
    assert _parse(p.line(60, 120.0))[3] == "20.0s"  # c's 10 again


def test_steps_reported_without_round_events_count_their_trials() -> None:
    """Ray workers send no round events: the trials come with the finished steps."""
    p = _printer()
    p.start(2, 200, {"a": 10, "b": 10})
    p.step(SimpleNamespace(node="a", name="a", outcome="tuned", trials=12))
    _, trials, _, left = _parse(p.line(p.trials, 24.0))
    assert trials == 12 and left == "20.0s"


def test_the_closing_line_has_a_full_bar_and_the_final_count() -> None:
    out = io.StringIO()
    p = ProgressPrinter("warm", stream=out)
    p.start(2, 400, {"a": 10, "b": 10})
    p.close(trials=17)
    filled, trials, most, _ = _parse(out.getvalue().splitlines()[-1])
    assert (filled, trials, most) == (20, 17, 400)
