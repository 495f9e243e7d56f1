"""`proxima simulate` run twice on a study with consent (issue 28, item 7): each run is a new crowd (new
rater ids, or the --prefix given), agrees to consent on its first visit, and lists no consent response
among its errors."""
from __future__ import annotations

import re

from test_simulate import PAIRS, accepted_line, live, make_study, points_file, server, simulate  # noqa: F401

from workers.store import keys


def test_simulate_twice_on_a_study_with_consent_accepts_answers_both_times(live, tmp_path):  # noqa: F811
    study = make_study(live["conn"], "sim-consent", PAIRS, params={"delta": 0.2, "sigma": 0.5, "window": 4},
                       consent="You agree to take part.", limits={"max_questions_per_rater": 5})
    truth = points_file(tmp_path, PAIRS)
    args = ("--url", live["base"], "--oracle", f"points:{truth}", "--raters", 4, "--think", 0, "--answers", 20,
            "--no-accuracy")
    first = simulate(study, *args)
    second = simulate(study, *args)
    for result in (first, second):
        assert result.exit_code == 0, result.output
        assert accepted_line(result.output) == 20, result.output
        assert "Errors: none" in result.output, result.output
    prefixes = [re.search(r"rater ids (\S+)-0 to", r.output).group(1) for r in (first, second)]
    assert prefixes[0] != prefixes[1] and all(p.startswith("sim-") for p in prefixes)
    third = simulate(study, *args, "--prefix", "pilot2")
    assert third.exit_code == 0 and accepted_line(third.output) == 20 and "Errors: none" in third.output
    raters = {r.decode() for r in live["conn"].smembers(keys.raters(study))}
    assert len(raters) == 12 and {r.rsplit("-", 1)[0] for r in raters} == {*prefixes, "pilot2"}
    bad = simulate(study, *args, "--prefix", "no spaces")
    assert bad.exit_code == 2 and "Invalid value for '--prefix'" in bad.output
