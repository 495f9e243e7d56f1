"""proxima plan: budget planning by simulation, checked against cases whose answer is known."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from engine import planning
from engine.triplet_csv import parse_triplets
from simulation.noise import fit_pilot
from simulation.oracles import TripletOracle

FAST = ["random_triplets", "embedding", "comparison_forest"]


def pairs(n_pairs: int = 10, gap: float = 0.05) -> np.ndarray:
    """Items in pairs on a circle of radius 5: each item's one nearest neighbour is its partner."""
    angle = 2 * np.pi * np.arange(n_pairs) / n_pairs
    centres = 5 * np.column_stack([np.cos(angle), np.sin(angle)])
    return np.repeat(centres, 2, axis=0) + np.tile([[0.0, 0.0], [gap, 0.0]], (n_pairs, 1))


def pair_distances(**kw) -> np.ndarray:
    D = TripletOracle.from_points(pairs(**kw)).distances
    return D / D.max()


def random_questions(n: int, m: int, rng) -> list[tuple[int, int, int]]:
    out = []
    while len(out) < m:
        h, a, b = rng.choice(n, 3, replace=False)
        out.append((int(h), int(a), int(b)))
    return out


def simulated_pilot(n_pairs: int, answers_per_item: int) -> tuple:
    """(truth, pilot triplets): raters of logistic scale 0.02 and lapse 0.15 on ``pair_distances``,
    asked ``answers_per_item`` random questions per item."""
    truth = planning.Scenario(pair_distances(n_pairs=n_pairs), 0.02, 0.15)
    n = truth.n_items
    rng = np.random.default_rng(3)
    answers = truth.oracle(rng).answer(random_questions(n, answers_per_item * n, rng))
    return truth, planning.triplets_from_answers(answers)


def test_noise_free_separated_pairs_reach_full_accuracy_on_a_small_budget():
    result = planning.plan([planning.Scenario(pair_distances(), 0.0, 0.0)], FAST, [10, 50, 200], runs=2)
    assert result.exact.shape == (3, 2, 3)
    best = result.best(1.0)
    assert best is not None, result.exact.mean(axis=1)
    mean, worst = result.reach(best, 1.0)
    assert mean.bound in ("=", "<=") and mean.value <= 50
    assert worst.bound != ">"
    # hit@3 is never below exact accuracy
    assert np.all(result.hit3 >= result.exact)


def test_raters_answering_at_random_leave_accuracy_at_chance_whatever_the_budget():
    # 20 items: a random pick is the partner 1 time in 19
    result = planning.plan([planning.Scenario(pair_distances(), 0.0, 1.0)], FAST, [10, 200], runs=2)
    assert result.exact.mean() < 0.2
    assert result.best(0.9) is None


def test_cost_and_target_are_printed_for_each_learner():
    result = planning.plan([planning.Scenario(pair_distances(), 0.0, 0.0)], ["comparison_forest"], [10, 50, 200],
                           runs=1, source="pairs")
    text = "\n".join(planning.format_plan(result, target=1.0, pay=0.05, currency="£"))
    # 20 items x 50 answers x 0.05 = 50.00
    assert "£50.00" in text and "1,000" in text
    assert "comparison_forest" in text and "Cheapest: comparison_forest." in text
    doc = result.to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["algorithms"]["comparison_forest"]["exact"]["mean"][-1] == 1.0


def test_reach_interpolates_between_budgets_and_says_when_never_reached():
    budgets = np.array([10.0, 20.0, 50.0])
    assert planning.reach(budgets, np.array([0.2, 0.6, 1.0]), 0.8) == planning.Reach(35.0, "=")
    assert planning.reach(budgets, np.array([0.9, 0.95, 1.0]), 0.8) == planning.Reach(10.0, "<=")
    assert planning.reach(budgets, np.array([0.1, 0.2, 0.3]), 0.8) == planning.Reach(50.0, ">")


def test_a_pilot_fit_errs_on_the_safe_side():
    # A pilot of 20 answers per item cannot resolve structure finer than its own noise: the plan it
    # gives must not promise more than the truth delivers (it may ask to buy more). Its raters lapse on
    # .15, too few answers to tell from the human model's .03 (the fit never assumes less than the model's).
    truth, pilot = simulated_pilot(n_pairs=15, answers_per_item=20)
    n = truth.n_items
    fit = fit_pilot(pilot, n, replicates=2)
    assert len(fit.scenarios) == 2
    assert fit.noise == "prior" and 0.03 <= fit.lapses[0] <= 0.3, fit.describe()
    budgets = [10, 50, 200]
    from_truth = planning.plan([truth], ["comparison_forest", "embedding"], budgets, runs=4)
    from_pilot = planning.plan(list(fit.scenarios), ["comparison_forest", "embedding"], budgets, runs=4)
    over = from_pilot.exact.mean(axis=1) - from_truth.exact.mean(axis=1)
    assert over.max() <= 0.1, (from_truth.exact.mean(axis=1), from_pilot.exact.mean(axis=1))
    # ... and it still sees that more answers buy accuracy
    assert np.all(from_pilot.exact.mean(axis=1)[:, -1] > from_pilot.exact.mean(axis=1)[:, 0])


def test_unknown_or_inapplicable_learners_are_refused_by_name():
    with pytest.raises(ValueError, match="simforest"):
        planning.plannable_algorithms(["simforest"])
    assert "anntri" in planning.plannable_algorithms()


def test_pilot_csv_reads_answer_exports_and_list_order_triplets():
    export = ("study,answer_id,kind,head,a,b,choice,algorithm\n"
              "s,1,triplet,0,1,2,2,anntri\n"
              "s,2,triplet,3,1,2,,anntri\n"   # skipped
              "s,3,rating,0,1,,,anntri\n"
              "s,4,triplet,0,1,2,1,catch\n"
              "s,5,triplet,0,2,1,2,repeat\n")  # a validation repeat is no new evidence
    assert parse_triplets(export, answers=True) == [(0, 2, 1)]
    assert parse_triplets("0,1,2\n3,4,5\n", answers=True) == [(0, 1, 2), (3, 4, 5)]
    with pytest.raises(ValueError, match=r"pilot.csv, line 1: expected three item indices 'i,j,k' \(or an answers"):
        parse_triplets("a;b\n", source="pilot.csv", answers=True)
    # without answers=True (proxima import-triplets) an answers export is refused, not read
    with pytest.raises(ValueError, match="line 1: expected three item indices 'i,j,k', got"):
        parse_triplets(export)
    with pytest.raises(ValueError, match="no answered triplet questions"):
        parse_triplets("kind,head,a,b,choice\nrating,0,1,,\n", answers=True)


@pytest.mark.parametrize("text,words", [
    ("0,1\n", "line 1: expected three item indices"),
    ("# a comment\n\n0,1,x\n", "line 3: item indices must be whole numbers"),
    ("0,1,2\n0;1;9\n", "line 2: item indices must lie in 0..4"),
    ("0\t1\t-1\n", "line 1: item indices must lie in 0..4"),
    ("0,1,1\n", "line 1: a triplet needs three different items"),
    ("kind,head,a,b,choice\ntriplet,0,1,7,7\n", "item indices must lie in 0..4"),
])
def test_triplet_csv_says_which_line_is_wrong_and_why(text, words):
    with pytest.raises(ValueError, match=words):
        parse_triplets(text, n_items=5, source="t.csv", answers=True)
    assert parse_triplets("# list order\n\n0;1;2\n4\t3\t2\n", n_items=5) == [(0, 1, 2), (4, 3, 2)]


def test_a_plan_stays_within_its_time_limit_and_says_which_budgets_it_did_not_reach():
    D = pair_distances(n_pairs=30)
    p = planning.plan([planning.Scenario(D, 0.02, 0.0)], ["random_triplets", "embedding"], [1, 5, 100_000],
                      runs=2, max_seconds=0.4)
    assert "embedding" in p.cut_short and np.isnan(p.exact[p.algorithms.index("embedding"), :, -1]).all()
    assert np.isfinite(p.exact[0, :, 0]).all()  # the first budget is reached
    doc = json.dumps(p.to_dict(), allow_nan=False)  # strict JSON: null where a budget was not reached
    assert "null" in doc
    mean, _ = p.reach("embedding", 0.999)
    assert mean.bound == ">" and mean.value <= 5
    lines = "\n".join(planning.format_plan(p, target=0.9))
    assert "time limit" in lines and " - " in lines


def test_processes_take_every_learners_first_run_then_the_costliest_learners_runs():
    order = planning._LongestFirst(learners=3, runs=2)  # runs 0-1: learner 0, 2-3: learner 1, 4-5: learner 2
    assert [order.next(), order.next()] == [0, 2]
    order.finished(0, 1.0)
    assert order.next() == 4  # the last first run
    order.finished(2, 5.0)
    assert order.next() == 5  # learner 2's first run is still going: the longest so far
    order.finished(4, 9.0)
    assert [order.next(), order.next(), order.next()] == [3, 1, None]


def test_a_plan_in_processes_is_the_plan_in_one():
    scenario = planning.Scenario(pair_distances(), 0.02, 0.05)
    one = planning.plan([scenario], ["random_triplets", "active_embedding"], [5, 20], runs=2)
    two = planning.plan([scenario], ["random_triplets", "active_embedding"], [5, 20], runs=2, jobs=2)
    np.testing.assert_array_equal(one.exact, two.exact)
    np.testing.assert_array_equal(one.hit3, two.hit3)


def test_plan_command_from_points_and_from_a_pilot_file(tmp_path):
    from webapp.cli import main

    X = pairs()
    points = tmp_path / "truth.csv"
    points.write_text("id,x1,x2\n" + "".join(f"i{i},{x},{y}\n" for i, (x, y) in enumerate(X)))
    out = tmp_path / "plan.json"
    runner = CliRunner()
    result = runner.invoke(main, ["plan", "--truth", f"points:{points}", "--noise", "0", "--lapse", "0",
                                  "--algorithms", "comparison_forest", "--budgets", "10,50,200", "--runs", "1",
                                  "--pay", "0.1", "--target", "1", "--jobs", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "$100.00" in result.output  # 20 items x 50 answers x 0.10
    assert json.loads(out.read_text())["reach"]["comparison_forest"]["bound"] != ">"
    rng = np.random.default_rng(0)
    D = pair_distances()
    rows = planning.triplets_from_answers(TripletOracle(D, random_state=0).answer(random_questions(20, 200, rng)))
    pilot = tmp_path / "pilot.csv"
    pilot.write_text("".join(f"{i},{j},{k}\n" for i, j, k in rows))
    result = runner.invoke(main, ["plan", "--pilot", str(pilot), "--algorithms", "random_triplets",
                                  "--budgets", "10,20", "--runs", "2", "--jobs", "2"])
    assert result.exit_code == 0, result.output
    assert "pilot of 200 answers" in result.output
    # what was assumed, and what pilot plans were measured to be worth
    assert "0.080 of the fitted world's robust range" in result.output
    assert "0.94-1.30x the answers a study needed at 100 items and 0.73-1.01x at 1,000" in result.output
    # what it assumed of careless raters: a file's triplets name no raters, so none were checked one by one
    assert "no raters checked one by one" in result.output
    assert "careless raters assumed only as the pilot shows them" in result.output
    result = runner.invoke(main, ["plan", "--pilot", str(pilot), "--truth", "eggs"])
    assert result.exit_code != 0 and "exactly one" in result.output


def test_calibration_takes_the_embeddings_own_error_out_of_the_pilots_noise():
    from simulation.noise import median_triplet_gap

    truth, pilot = simulated_pilot(n_pairs=50, answers_per_item=10)
    n, D = truth.n_items, truth.distances
    true_scale = 0.02 / median_triplet_gap(D)
    raw = fit_pilot(pilot, n, replicates=1, calibrate=False).relative_scales[0]
    fit = fit_pilot(pilot, n, replicates=1)
    assert fit.calibration < 1
    # cross-fitting alone overstates the noise; the calibrated scale is closer to the raters' own
    assert raw > true_scale
    assert abs(np.log(fit.relative_scales[0] / true_scale)) < abs(np.log(raw / true_scale))


def test_plan_command_from_a_running_studys_answers_is_shown_on_its_dashboard(redis_url, conn, tmp_path, monkeypatch,
                                                                                 researcher_client):
    from webapp.cli import main
    from workers.results.exports import import_triplets
    from workers.store import keys
    from workers.store.config import StudyConfig
    from workers.store.studies import Item, create_study

    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    X = pairs()
    items = [Item(id=f"p{i}", kind="color", color="#102030", position=tuple(x)) for i, x in enumerate(X)]
    create_study(conn, StudyConfig(name="Pilot", algorithms=({"algorithm": "random_triplets"},)), items,
                 study_id="pilot")
    result = CliRunner().invoke(main, ["plan", "--study", "pilot", "--jobs", "1"])
    assert result.exit_code != 0 and "no triplet answers yet" in result.output
    rng = np.random.default_rng(1)
    rows = planning.triplets_from_answers(
        TripletOracle(pair_distances(), random_state=1).answer(random_questions(20, 200, rng)))
    for r in range(10):  # 10 raters of 20 answers: enough to check them one by one
        import_triplets(conn, "pilot", "".join(f"{i},{j},{k}\n" for i, j, k in rows[20 * r:20 * (r + 1)]),
                        rater=f"r{r}")
    result = CliRunner().invoke(main, ["plan", "--study", "pilot", "--algorithms", "random_triplets",
                                       "--budgets", "10,20", "--runs", "2", "--jobs", "1", "--pay", "0.1"])
    assert result.exit_code == 0, result.output
    assert "pilot of 200 answers" in result.output
    assert "its 10 raters checked one by one against a world fitted without each: alike" in result.output
    stored = json.loads(conn.get(keys.plan("pilot")))
    assert stored["pay"] == 0.1 and list(stored["algorithms"]) == ["random_triplets"]
    page = researcher_client.get("/studies/pilot?tab=learning").get_data(as_text=True)
    assert 'id="plan-table"' in page and 'id="plan-plot"' in page


def test_kinds_are_compared_by_screens_rater_time_and_money():
    """Every learner asks every kind planned; noise-free separated pairs are found by each kind, and the
    rater hours and the wage's cost follow each kind's seconds per screen (a given one replaces the
    stated default)."""
    from engine.kinds import get_kind

    result = planning.plan([planning.Scenario(pair_distances(), 0.0, 0.0)], ["embedding"], [20, 100], runs=1,
                           kinds=["triplet", "odd_one_out", "rank"], settings={"rank": {"n_reference": 4,
                                                                                         "n_select": 1}},
                           seconds={"odd_one_out": 5.0})
    assert result.algorithms == ("embedding", "embedding (odd_one_out)", "embedding (rank 4-1)")
    assert (result.hit3[:, 0, -1] >= 0.9).all(), result.hit3
    triplet_s = get_kind("triplet").screen_seconds({})
    rank_s = get_kind("rank").screen_seconds({"n_reference": 4, "n_select": 1})
    assert result.rater_hours("embedding", 100) == pytest.approx(100 * 20 * triplet_s / 3600)
    assert result.rater_hours("embedding (odd_one_out)", 100) == pytest.approx(100 * 20 * 5.0 / 3600)
    assert result.rater_hours("embedding (rank 4-1)", 100) == pytest.approx(100 * 20 * rank_s / 3600)
    text = "\n".join(planning.format_plan(result, target=0.9, metric="hit3", wage=18.0))
    # 100 screens per item x 20 items x 5 s = 2.8 h, at 18 an hour
    assert "odd_one_out 5.0 s" in text and f"${100 * 20 * 5.0 / 3600 * 18:,.2f}" in text
    assert result.to_dict()["algorithms"]["embedding (rank 4-1)"]["kind"] == "rank"
    with pytest.raises(ValueError, match="rating"):
        planning.plan([planning.Scenario(pair_distances(), 0.0, 0.0)], ["embedding"], [10], kinds=["rating"])


def test_a_pilots_answers_export_gives_every_triplet_its_screens_imply():
    text = ("kind,head,a,b,choice,algorithm,shown,picks\n"
            "odd_one_out,0,1,2,2,duels,0 1 2,2\n"
            "rank,0,1,2,1,duels,0 1 2 3 4,1 3\n"
            "triplet,5,6,7,7,duels,,\n"
            "rank,0,1,2,1,catch,0 1 2 3 4,1 3\n")
    rows = parse_triplets(text, answers=True)
    assert sorted(rows) == sorted([(0, 1, 2), (1, 0, 2), (0, 1, 3), (0, 1, 2), (0, 1, 4),
                                                        (0, 3, 2), (0, 3, 4), (5, 7, 6)])


def _plan_of(exact: list[list[list[float]]], stopped=None) -> planning.Plan:
    a = np.asarray(exact, dtype=float)
    names = tuple(["anntri", "ann", "random_triplets"][: len(a)])
    return planning.Plan(names, np.array([10.0, 20.0, 50.0]), 30, a, a.copy(), np.ones(a.shape[:2]), "a truth",
                         "seeds", (), None if stopped is None else np.asarray(stopped, dtype=float))


def test_a_plan_says_why_a_curve_is_flat_the_same_as_another_or_falling():
    rising = [[0.1, 0.3, 0.6], [0.2, 0.4, 0.7]]
    p = _plan_of([rising, rising, [[0.5, 0.4, 0.2], [0.5, 0.42, 0.22]]],
                 stopped=[[np.nan, np.nan], [np.nan, np.nan], [35.0, 40.0]])
    assert planning.curve_notes(p, 0) == []  # a plain rising curve needs no word
    same, = planning.curve_notes(p, 1)
    assert "the same accuracy as anntri in every run" in same
    stopped, falls = planning.curve_notes(p, 2)
    assert "stopped asking in 2 of 2 runs, at 35-40 screens per item" in stopped
    assert "falls from 0.50 at 10 to 0.41 at 20" in falls
    # within the runs' spread a dip is noise, not a falling curve
    assert planning.curve_notes(_plan_of([[[0.5, 0.48, 0.6], [0.5, 0.47, 0.62]]]), 0) == []
    # the notes go to the dashboard's JSON and the printed plan
    assert p.to_dict()["algorithms"]["ann"]["notes"] == [same]
    assert f"  Note: {same}" in planning.format_plan(p)


def test_plan_command_draws_its_curves_and_shortlists_a_comparison_of_kinds(tmp_path):
    """--plot writes an SVG with one curve and legend entry per line; --kinds without --algorithms plans each
    kind's default learner beside the random-question peer (not every learner of every kind) and says so."""
    from xml.etree import ElementTree

    from webapp.cli import main

    points = tmp_path / "truth.csv"
    points.write_text("id,x1,x2\n" + "".join(f"i{i},{x},{y}\n" for i, (x, y) in enumerate(pairs())))
    svg = tmp_path / "plan.svg"
    result = CliRunner().invoke(main, ["plan", "--truth", f"points:{points}", "--noise", "0", "--lapse", "0",
                                       "--kinds", "triplet,odd_one_out", "--budgets", "10,20", "--runs", "1",
                                       "--jobs", "1", "--metric", "hit3", "--plot", str(svg)])
    assert result.exit_code == 0, result.output
    assert "each kind's default learner and the random-question peer (duels, embedding)" in result.output
    ns = {"svg": "http://www.w3.org/2000/svg"}
    root = ElementTree.parse(svg).getroot()
    curves = root.findall("svg:polyline", ns)
    legend = [t.text for t in root.findall("svg:text", ns)]
    lines = ["duels", "embedding", "duels (odd_one_out)", "embedding (odd_one_out)"]
    assert len(curves) == len(lines) and all(name in legend for name in lines), legend
    assert all(len(c.get("points").split()) == 2 for c in curves)  # a point per budget
    assert "hit@3 accuracy" in legend


def test_a_plan_with_the_items_features_plans_each_feature_learner_without_and_with_them(tmp_path):
    """--features: duels is planned twice (its line '+ features' beside it); features that are the items'
    own positions make it right sooner; a learner that uses no features is planned once."""
    from webapp.cli import main

    X = pairs()
    points = tmp_path / "truth.csv"
    points.write_text("id,x1,x2\n" + "".join(f"i{i},{x},{y}\n" for i, (x, y) in enumerate(X)))
    features = tmp_path / "features.csv"
    features.write_text("id,a,b\n" + "".join(f"i{i},{x},{y}\n" for i, (x, y) in enumerate(X)))
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(main, ["plan", "--truth", f"points:{points}", "--noise", "0", "--lapse", "0",
                                       "--algorithms", "duels,random_triplets", "--budgets", "2,5", "--runs", "1",
                                       "--jobs", "1", "--features", str(features), "--json", str(out)])
    assert result.exit_code == 0, result.output
    lines = json.loads(out.read_text())["algorithms"]
    assert list(lines) == ["random_triplets", "duels", "duels + features"]
    assert lines["duels + features"]["exact"]["mean"][0] >= lines["duels"]["exact"]["mean"][0]
    assert lines["duels + features"]["exact"]["mean"][0] == 1.0  # the features say who the partner is
    wrong = tmp_path / "short.csv"
    wrong.write_text("id,a\ni0,1\ni1,2\n")
    result = CliRunner().invoke(main, ["plan", "--truth", f"points:{points}", "--algorithms", "duels",
                                       "--features", str(wrong)])
    assert result.exit_code != 0 and "no features for 18 item(s)" in result.output, result.output


def test_a_pilot_of_human_model_raters_plans_with_the_models_noise_and_careless_raters_raise_the_lapse():
    # A pilot of 10 answers per item cannot measure its raters' noise (calibrating it gave plans 0.6-2.2x the
    # answers the truth needs, benchmarks/pilot_plan.py): the world takes the human model's scale, as a share
    # of each replicate's world's robust range, and its lapse, unless the pilot shows worse raters.
    from simulation.noise import HUMAN_RANGE_SCALE

    rng = np.random.default_rng(4)
    X = np.repeat(rng.uniform(0, 10, size=(12, 3)), 5, axis=0) + rng.normal(scale=0.3, size=(60, 3))
    D = TripletOracle.from_points(X).distances
    D = D / D.max()
    questions = random_questions(60, 1200, rng)  # 20 per item: at 10 raters lapsing on .3 fell 5.2 SE short
    fits = {}
    for lapse in (0.03, 0.3):
        world = planning.Scenario(D, 0.075, lapse)
        pilot = planning.triplets_from_answers(world.oracle(np.random.default_rng(5)).answer(questions))
        fits[lapse] = fit_pilot(pilot, 60, replicates=2)
    usual, careless = fits[0.03], fits[0.3]
    assert usual.noise == "prior" and usual.scale_from_prior and usual.lapse_from_prior, usual.describe()
    assert np.allclose(usual.range_scales, HUMAN_RANGE_SCALE) and np.allclose(usual.lapses, 0.03)
    assert "the human model's unless the pilot shows worse raters" in usual.describe()
    assert not careless.lapse_from_prior and np.all(careless.lapses > 0.15), careless.describe()
    assert "surest answers disagree more" in careless.describe()


def test_the_human_models_scale_in_robust_ranges_is_the_alien_egg_crowds():
    from helpers import EGG_ANSWERS, shared_data_file

    from simulation.datasets import load_alien_eggs
    from simulation.noise import HUMAN_MEDIAN_GAP, HUMAN_RANGE_SCALE, HUMAN_ROBUST_RANGE, alien_egg_noise, robust_range

    shared_data_file(EGG_ANSWERS)
    fit = alien_egg_noise()
    assert abs(fit.median_gap - HUMAN_MEDIAN_GAP) < 0.001
    eggs = load_alien_eggs().distances
    assert abs(robust_range(eggs) - HUMAN_ROBUST_RANGE) < 0.001
    assert abs(fit.scale / robust_range(eggs) - HUMAN_RANGE_SCALE) < 0.005


def test_the_robust_range_grows_with_the_items_as_the_range_does_and_ignores_a_misplaced_item():
    # Raters stated as a share of the largest distance (the human model, the truths of benchmarks/pilot_plan.py)
    # are more median gaps of 1,000 items than of 100 drawn alike; as a share of the robust range they stay put.
    from simulation.noise import median_triplet_gap, robust_range

    rng = np.random.default_rng(0)
    ratio = {}
    for n in (100, 1000):
        D = TripletOracle.from_points(rng.uniform(size=(n, 3))).distances
        ratio[n] = (D.max() / robust_range(D), D.max() / median_triplet_gap(D, 20_000))
    assert ratio[1000][1] / ratio[100][1] > 1.08  # in median gaps the same raters are noisier at 1,000 items
    assert abs(np.log(ratio[1000][0] / ratio[100][0])) < 0.5 * np.log(ratio[1000][1] / ratio[100][1])
    X = rng.uniform(size=(100, 3))
    D = TripletOracle.from_points(X).distances
    X[0] = 3.0  # an item an embedding threw far out
    far = TripletOracle.from_points(X).distances
    assert far.max() > 2 * D.max() and abs(robust_range(far) / robust_range(D) - 1) < 0.05


def test_a_pilots_world_takes_the_smallest_dimension_within_a_standard_error_of_the_best():
    # benchmarks/pilot_plan.py, uniform 3-D truth, 1,000 items, pilot seed 5 (10,000 answers): 5-D held out .6180,
    # 3-D .6159. In the 5-D world duels' 4-D and 8-D fits predicted its fresh duels alike, 1-NN in them hit a true 3
    # nearest .52 and .72 of the time, and the run whose dimension recheck chose 4-D fell from .72 to .48 hit@3
    # between 160 and 300 answers per item: the 3-D world plans 238 answers per item where the truth needs 236.
    from simulation.noise import _parsimonious

    scores = {("ste", 2): 0.554, ("tste", 2): 0.555, ("tste", 3): 0.6159, ("tste", 5): 0.6180, ("tste", 8): 0.601,
              ("human", 1): 0.545}
    assert _parsimonious(scores, ("tste", 5), 10_000) == ("tste", 3)
    assert _parsimonious(scores, ("tste", 5), 1_000_000) == ("tste", 5)  # a standard error of .0005: 5-D earns it
    scores[("human", 1)] = 0.63  # the line only where it is the best
    assert _parsimonious(scores, ("human", 1), 10_000) == ("human", 1)
    scores[("human", 1)] = 0.617
    assert _parsimonious(scores, ("tste", 5), 10_000) == ("tste", 3)


def careless_pilot(n: int, share: float, seed: int, per_item: int = 10, per_rater: int = 20) -> tuple:
    """(triplets, the rater of each): random questions on n items drawn in 2-D, answered by raters of ``per_rater``
    answers, the first ``share`` of them at random, the others logistic 0.075 of the largest distance, lapse .03
    (``benchmarks/pilot_lapse.py``'s pilots)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    D = TripletOracle.from_points(X).distances
    questions = np.array(random_questions(n, n * per_item, rng))
    answers = np.asarray(planning.Scenario(D / D.max(), 0.075, 0.03).oracle(np.random.default_rng(seed + 1)).answer(
        [tuple(q) for q in questions.tolist()]))
    raters = np.arange(len(questions)) // per_rater
    careless = raters < share * (raters.max() + 1)
    answers[careless, 3] = np.where(rng.random(int(careless.sum())) < 0.5, questions[careless, 1],
                                    questions[careless, 2])
    return planning.triplets_from_answers(answers), raters


def test_a_pilots_raters_checked_one_by_one_show_careless_ones_and_the_plan_says_what_it_assumed():
    # Raters answering at random agree less with a world fitted without them than careful raters do; at 30 answers
    # per item from raters of 50, 30% of them answering at random are caught (5 seeds of 5), careful raters not
    # (0 of 5). At 10 answers per item from raters of 20 few are (benchmarks/pilot_lapse.py): either way the plan
    # assumes none, and its header says so.
    from simulation.noise import CARELESS_ASSUMED, check_raters

    checks = {}
    for share in (0.0, 0.3):
        triplets, raters = careless_pilot(100, share, 0, per_item=30, per_rater=50)
        checks[share] = check_raters(triplets, raters, 100, 2, "tste")
    assert checks[0.3].caught and checks[0.3].z > 4, checks[0.3]
    assert not checks[0.0].caught and checks[0.0].z < 2, checks[0.0]
    assert "not alike" in checks[0.3].describe() and "alike (p = " in checks[0.0].describe()
    # raters not alike: the lapse is calibrated (true .3 + .7 x .03 = .32)
    triplets, raters = careless_pilot(100, 0.3, 0, per_item=30, per_rater=50)
    fit = fit_pilot(triplets, 100, replicates=1, raters=raters)
    assert fit.raters.caught and not fit.lapse_from_prior and 0.15 < fit.lapses[0] < 0.5, fit.describe()
    assert "measured: its raters are not alike" in fit.describe()
    triplets, raters = careless_pilot(60, 0.3, 1)
    fit = fit_pilot(triplets, 60, replicates=1, raters=raters)
    assert fit.raters is not None and fit.raters.n_raters == 30 and fit.describe().endswith(CARELESS_ASSUMED)
    assert "no raters checked one by one" in fit_pilot(triplets, 60, replicates=1).describe()
    with pytest.raises(ValueError, match="one rater per pilot answer"):
        check_raters(triplets, raters[1:], 60, 2, "tste")


def test_a_pilot_answers_export_names_its_raters_and_the_plan_checks_them(tmp_path):
    # an answers export has a rater column: `proxima plan --pilot answers.csv` checks its raters one by one
    # as a pilot study's (`--study`) are, and finds the careless ones; rows i,j,k name none
    from engine.triplet_csv import parse_triplet_answers
    from webapp.cli import main

    triplets, raters = careless_pilot(100, 0.3, 0, per_item=30, per_rater=50)
    lines = ["answer_id,kind,head,a,b,choice,algorithm,rater"]
    for n, ((i, j, k), r) in enumerate(zip(triplets.tolist(), raters.tolist(), strict=True)):
        a, b = (j, k) if n % 2 else (k, j)
        lines.append(f"{n},triplet,{i},{a},{b},{j},random_triplets,rater-{r}")
    lines.append(f"{len(lines)},triplet,0,1,2,1,catch,rater-0")  # a catch answer is no evidence: left out
    export = tmp_path / "answers.csv"
    export.write_text("\n".join(lines) + "\n")
    rows, who = parse_triplet_answers(export.read_text())
    assert rows == [tuple(t) for t in triplets.tolist()] and who == [f"rater-{r}" for r in raters.tolist()]
    assert parse_triplet_answers("0,1,2\n") == ([(0, 1, 2)], None)
    result = CliRunner().invoke(main, ["plan", "--pilot", str(export), "--algorithms", "random_triplets",
                                       "--budgets", "10", "--runs", "1", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "measured: its raters are not alike" in result.output and "no raters checked" not in result.output


def test_the_same_accuracy_is_noted_only_between_lines_asking_the_same_kind_with_something_to_tell():
    rising = [[0.1, 0.3, 0.6], [0.2, 0.4, 0.7]]
    a = np.asarray([rising, rising], dtype=float)
    arms = (planning.Arm("duels", "pick_k"), planning.Arm("embedding", "rank"))
    p = planning.Plan(("duels", "embedding"), np.array([10.0, 20.0, 50.0]), 30, a, a.copy(), np.ones(a.shape[:2]),
                      "a truth", "seeds", arms)
    assert planning.curve_notes(p, 1) == []  # other kinds: the two did not ask alike
    # curves pinned at 1.0 (every pick right at every budget) say nothing of how two lines asked
    assert planning.curve_notes(_plan_of([[[1.0, 1.0, 1.0]], [[1.0, 1.0, 1.0]]]), 1) == []
    same_kind = planning.Plan(("duels", "embedding"), np.array([10.0, 20.0, 50.0]), 30, a, a.copy(),
                              np.ones(a.shape[:2]), "a truth", "seeds",
                              (planning.Arm("duels", "rank"), planning.Arm("embedding", "rank")))
    assert "the same accuracy as duels" in planning.curve_notes(same_kind, 1)[0]


@pytest.mark.parametrize("kind", ["triplet", "same_different"])
def test_the_plan_widens_a_planner_in_rounds_as_the_worker_does_whatever_the_kind(kind, monkeypatch):
    # the worker's pool refill calls refill_rounds for every planner in rounds (workers.jobs.update_pass), the
    # study's window (1 by default) widened while the open rounds have too few questions; the plan must too, or
    # its ANNTri lines in a pair-kind study ask one round at a time while the live study does not
    calls = []
    real = planning.refill_rounds

    def spy(planner, budget, window=None):
        calls.append(window)
        return real(planner, budget, window)

    monkeypatch.setattr(planning, "refill_rounds", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    planning.simulate_curve("anntri", planning.Scenario(D / D.max(), 0.05, 0.03), [5], seed=0, kind=kind)
    assert calls and set(calls) == {1}
