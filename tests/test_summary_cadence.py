"""The dashboard summary written while passes go on costs at most SUMMARY_SHARE of the worker's time:
at 50,000 items a summary of duels takes seconds, and written every second it left the passes none."""
import time

from workers.jobs import summary


def test_a_costly_summary_waits_in_proportion_to_its_cost(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setitem(summary._summarised, "s", 1000.0)
    monkeypatch.setitem(summary._summary_cost, "s", 0.01)  # a small study: every SUMMARY_SECONDS
    now[0] = 1000.0 + summary.SUMMARY_SECONDS * 0.5
    assert not summary.summary_due("s", summary.SUMMARY_SECONDS)
    now[0] = 1000.0 + summary.SUMMARY_SECONDS
    assert summary.summary_due("s", summary.SUMMARY_SECONDS)
    monkeypatch.setitem(summary._summary_cost, "s", 5.0)  # 50,000 items: a 5 s summary
    wait = 5.0 / summary.SUMMARY_SHARE
    now[0] = 1000.0 + wait - 1
    assert not summary.summary_due("s", summary.SUMMARY_SECONDS)
    now[0] = 1000.0 + wait
    assert summary.summary_due("s", summary.SUMMARY_SECONDS)
    # a job that settles writes it at once, whatever it costs; a study never summarised is due
    now[0] = 1000.5
    assert summary.summary_due("s", 0.0)
    assert summary.summary_due("never", summary.SUMMARY_SECONDS)
