"""Learners trained on what a study collected: SMERF (a distance over item features), similarity
TreeRank and its ranking forest (which pairs are alike), SimForest (item classes from similarities).

Each is fitted on one study's items (features, labels) and crowd distance estimates, checked on
held-out data, stored in Redis (estimator state + the researcher's JSON export) and can predict for
new items. Must never import Flask.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from workers.jobs.learners import Learner
from workers.store import engine_state, keys
from workers.store.studies import StudyError, feature_matrix, get_items, get_study, initial_item_count

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from redis import Redis

    from workers.store.studies import Item


#: model name -> what it learns, for help texts and errors
MODELS = {
    "smerf": "a distance over item features (SMERF distance forest) from the crowd's distance estimates",
    "treerank": "a similarity score over pairs of item features (similarity TreeRank)",
    "ranking_forest": "a bagged forest of similarity TreeRank trees",
    "simforest": "item classes from the crowd's similarities (SimForest)",
}
EXPORT_SCHEMA_VERSION = 1
#: Share of observed pairs (or items) held out to report how well a model generalises.
HOLDOUT_SHARE = 0.2
#: At most this many labelled pairs train a TreeRank model (balanced between alike and unlike).
MAX_TRAINING_PAIRS = 200_000


class ModelError(ValueError):
    """A model that cannot be trained or used; the message says what the study lacks."""


@dataclass(frozen=True)
class CrowdDistances:
    """The crowd's distance estimates of one distance learner, in [0, 1]; NaN where no pair was asked."""

    algorithm: str
    distances: np.ndarray  # (n_items, n_items), symmetric, diagonal 0
    counts: np.ndarray  # (n_items, n_items) answers behind each estimate

    @property
    def n_observed_pairs(self) -> int:
        return int(np.count_nonzero(np.triu(self.counts, 1)))


def _check_model(name: str) -> str:
    if name not in MODELS:
        raise ModelError(f"there is no model '{name}'; models: {', '.join(MODELS)}")
    return name


def crowd_distances(conn: Redis, study_id: str, algorithm: str | None = None) -> CrowdDistances:
    """Distance estimates from a distance learner of the study (the named one, else the first)."""
    study = get_study(conn, study_id)
    graph_learners = [a for a in study.config.algorithms if a.learns_graph]
    if algorithm is not None:
        alg = study.config.get_algorithm(algorithm)
        if alg is None:
            raise ModelError(f"study '{study_id}' has no algorithm '{algorithm}'; its algorithms are: "
                             f"{study.config.algorithm}")
        if not alg.learns_graph:
            raise ModelError(f"algorithm '{algorithm}' is a {alg.algorithm}, which estimates no distances; "
                             "use an anntri, ann or random algorithm")
    elif not graph_learners:
        raise ModelError(f"study '{study_id}' has no algorithm that estimates distances (anntri, ann or random)")
    else:
        alg = graph_learners[0]
    state = engine_state.load(conn, study_id, alg.label)
    if state is None:
        raise ModelError(f"algorithm '{alg.label}' of study '{study_id}' has no answers applied yet")
    planner = Learner.from_state(alg, study.config, state).planner
    counts = np.asarray(planner.count_, dtype=np.int64)
    distances = np.where(counts > 0, planner.mean_, np.nan)
    np.fill_diagonal(distances, 0.0)
    return CrowdDistances(alg.label, distances, counts)


def _study_features(conn: Redis, study_id: str):
    study = get_study(conn, study_id)
    n = initial_item_count(conn, study_id, study.n_items)
    items = get_items(conn, study_id)[:n]
    try:
        names, rows = feature_matrix(items)
    except StudyError as exc:
        raise ModelError(str(exc)) from None
    return items, names, np.asarray(rows, dtype=np.float64)


def _labels(items) -> np.ndarray:
    missing = [i.id for i in items if i.label is None]
    if missing:
        raise ModelError(f"items need labels for this model; without one: {', '.join(missing[:10])} "
                         "(add a 'label' column to the items CSV)")
    return np.asarray([i.label for i in items], dtype=object)


def _held_out_items(n: int, rng: np.random.Generator) -> np.ndarray:
    """A mask of the items held out: a model is checked on pairs involving an item it never saw."""
    mask = np.zeros(n, bool)
    mask[rng.permutation(n)[: max(1, int(round(HOLDOUT_SHARE * n)))]] = True
    return mask


def _train_smerf(conn: Redis, study_id, algorithm, params, seed):
    from scipy.stats import spearmanr

    from engine.smerf import DistanceForest

    items, names, X = _study_features(conn, study_id)
    crowd = crowd_distances(conn, study_id, algorithm)
    n = len(items)
    Z = crowd.distances[:n, :n]
    if crowd.n_observed_pairs < 10:
        raise ModelError(f"SMERF needs distance estimates for at least 10 pairs; '{crowd.algorithm}' has "
                         f"{crowd.n_observed_pairs}")
    held_out = _held_out_items(n, np.random.default_rng(seed))
    iu, ju = np.nonzero(np.triu(crowd.counts[:n, :n], 1))
    test = held_out[iu] | held_out[ju]
    masked = Z.copy()
    masked[held_out, :] = np.nan
    masked[:, held_out] = np.nan
    # every feature is tried at each split unless asked otherwise: a study has few features and
    # only some matter, where sqrt(p) of them per split misses them (benchmarks/smerf.py)
    params = {"max_features": None, **params}
    weights = crowd.counts[:n, :n].astype(np.float64)  # a pair answered more often is known better
    check = DistanceForest(random_state=seed, **params).fit(X, masked, pair_weight=weights)
    predicted = check.predict_pairs(X[iu[test]], X[ju[test]])
    truth = Z[iu[test], ju[test]]
    n_test = int(test.sum())
    held = {"held_out_items": int(held_out.sum()), "held_out_pairs": n_test,
            "held_out_rmse": float(np.sqrt(np.mean((predicted - truth) ** 2))) if n_test else None,
            "held_out_spearman": float(spearmanr(predicted, truth).statistic) if n_test > 2 else None}
    forest = DistanceForest(random_state=seed, **params).fit(X, Z, pair_weight=weights, feature_names=names)
    importances = sorted(zip(names, forest.feature_importances_.tolist(), strict=True), key=lambda t: -t[1])
    summary = {"algorithm": crowd.algorithm, "observed_pairs": crowd.n_observed_pairs, "features": names,
               "feature_importances": [{"feature": f, "importance": round(v, 6)} for f, v in importances], **held}
    return forest, summary, {"feature_names": names}


def _pairs_and_labels(conn: Redis, study_id, items, algorithm, threshold):
    """(pairs, y): from item labels, or from crowd distances at most ``threshold`` (alike = +1)."""
    from engine.treerank import pairs_from_labels, pairs_from_ratings

    if threshold is None:
        labels = _labels(items)
        _, codes = np.unique(labels.astype(str), return_inverse=True)
        # every alike pair and as many unlike ones, at most MAX_TRAINING_PAIRS (all pairs of a few
        # thousand items would not fit in memory)
        pairs, y = pairs_from_labels(codes, n_pairs=MAX_TRAINING_PAIRS, balanced=True, random_state=0)
        return np.asarray(pairs), np.asarray(y), {"pair_labels": "item labels"}
    crowd = crowd_distances(conn, study_id, algorithm)
    n = len(items)
    iu, ju = np.nonzero(np.triu(crowd.counts[:n, :n], 1))
    if len(iu) == 0:
        raise ModelError(f"'{crowd.algorithm}' has no distance estimates yet")
    d = crowd.distances[iu, ju]
    y = pairs_from_ratings(np.column_stack([iu, ju]), d, threshold, higher_is_alike=False)
    if len(np.unique(y)) < 2:
        raise ModelError(f"with threshold {threshold} every observed pair is {'alike' if y[0] > 0 else 'unlike'}; "
                         f"choose a threshold between {d.min():.3f} and {d.max():.3f}")
    return np.column_stack([iu, ju]), np.asarray(y), {"pair_labels": f"crowd distance <= {threshold}",
                                                      "algorithm": crowd.algorithm}


def _train_treerank(conn: Redis, study_id, algorithm, params, seed, threshold, forest: bool):
    from engine.treerank import RankingForest, SimilarityTreeRank, auc, tpr_at_fpr

    items, names, X = _study_features(conn, study_id)
    pairs, y, source = _pairs_and_labels(conn, study_id, items, algorithm, threshold)
    make = (lambda: RankingForest(random_state=seed, **params)) if forest else (
        lambda: SimilarityTreeRank(random_state=seed, **params))
    held_out = _held_out_items(len(items), np.random.default_rng(seed))
    test = held_out[pairs[:, 0]] | held_out[pairs[:, 1]]
    train_rows = ~test
    held = {"held_out_items": int(held_out.sum()), "held_out_pairs": int(test.sum())}
    if len(np.unique(y[test])) == 2 and len(np.unique(y[train_rows])) == 2:
        check = make().fit_pairs(X, pairs[train_rows], y[train_rows])
        scores = check.score(X[pairs[test, 0]], X[pairs[test, 1]])
        held.update(held_out_auc=float(auc(scores, y[test])), held_out_tpr_at_fpr_0_1=float(
            tpr_at_fpr(scores, y[test], 0.1)))
    model = make().fit_pairs(X, pairs, y)
    summary = {**source, "pairs": len(pairs), "alike_pairs": int((y > 0).sum()), "features": names, **held}
    return model, summary, {"feature_names": names}


def _train_simforest(conn: Redis, study_id, algorithm, params, seed):
    from engine.simforest import SimilarityForest

    study = get_study(conn, study_id)
    n = initial_item_count(conn, study_id, study.n_items)
    items = get_items(conn, study_id)[:n]
    labels = _labels(items)
    crowd = crowd_distances(conn, study_id, algorithm)
    S = 1.0 - crowd.distances[:n, :n]
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    test, train = order[: max(1, int(round(HOLDOUT_SHARE * n)))], order[max(1, int(round(HOLDOUT_SHARE * n))):]
    check = SimilarityForest(random_state=seed, **params).fit(S[np.ix_(train, train)], labels[train])
    predicted = check.predict(S[np.ix_(test, train)])
    forest = SimilarityForest(random_state=seed, **params).fit(S, labels)
    summary = {"algorithm": crowd.algorithm, "observed_pairs": crowd.n_observed_pairs,
               "missing_share": round(1 - crowd.n_observed_pairs / (n * (n - 1) / 2), 4),
               "classes": sorted({str(x) for x in labels}), "held_out_items": len(test),
               "held_out_accuracy": float(np.mean(predicted == labels[test]))}
    return forest, summary, {"item_ids": [i.id for i in items]}


def train(conn: Redis, study_id: str, name: str, algorithm: str | None = None, params: dict | None = None,
          threshold: float | None = None, random_state: int | None = None) -> dict:
    """Fit model ``name`` on the study's data, check it on held-out data, store it; returns its
    metadata (what it was trained on and the held-out figures)."""
    _check_model(name)
    study = get_study(conn, study_id)
    params = dict(params or {})
    seed = random_state if random_state is not None else study.config.random_state
    seed = 0 if seed is None else int(seed)
    try:
        if name == "smerf":
            model, summary, extra = _train_smerf(conn, study_id, algorithm, params, seed)
        elif name in ("treerank", "ranking_forest"):
            model, summary, extra = _train_treerank(conn, study_id, algorithm, params, seed, threshold,
                                                    forest=name == "ranking_forest")
        else:
            model, summary, extra = _train_simforest(conn, study_id, algorithm, params, seed)
    except TypeError as exc:  # an unknown keyword in params
        raise ModelError(f"{name}: {exc}") from None
    meta = {"model": name, "study": study_id, "trained_at": time.time(), "params": params,
            "random_state": seed, "threshold": threshold, "summary": summary, **extra}
    doc = {"schema_version": EXPORT_SCHEMA_VERSION, "study": study_id, "model": name,
           "trained_at": meta["trained_at"], "summary": summary, **extra, "estimator": model.to_json()}
    fields = engine_state.encode_state(model.to_state())
    fields["meta"] = json.dumps(meta).encode()
    fields["export"] = json.dumps(doc).encode()
    with conn.pipeline(transaction=True) as pipe:
        pipe.delete(keys.model(study_id, name))
        pipe.hset(keys.model(study_id, name), mapping=fields)
        pipe.execute()
    return meta


def model_meta(conn: Redis, study_id: str, name: str) -> dict | None:
    raw = conn.hget(keys.model(study_id, _check_model(name)), "meta")
    return None if raw is None else json.loads(raw)


def trained_models(conn: Redis, study_id: str) -> dict[str, dict]:
    """Metadata of every model trained on the study, by name."""
    out = {}
    for name in MODELS:
        meta = model_meta(conn, study_id, name)
        if meta is not None:
            out[name] = meta
    return out


def model_export(conn: Redis, study_id: str, name: str) -> dict:
    get_study(conn, study_id)
    raw = conn.hget(keys.model(study_id, _check_model(name)), "export")
    if raw is None:
        raise ModelError(f"no {name} model has been trained on study '{study_id}'; run "
                         f"'proxima train {study_id} --model {name}' first")
    return json.loads(raw)


def load_model(conn: Redis, study_id: str, name: str) -> tuple[Any, dict]:
    """(estimator, meta) of a stored model."""
    fields = conn.hgetall(keys.model(study_id, _check_model(name)))
    if b"meta" not in fields:
        raise ModelError(f"no {name} model has been trained on study '{study_id}'; run "
                         f"'proxima train {study_id} --model {name}' first")
    meta = json.loads(fields[b"meta"])
    state = engine_state.decode_state({k: v for k, v in fields.items() if k not in (b"meta", b"export")})
    if name == "smerf":
        from engine.smerf import DistanceForest as cls
    elif name == "treerank":
        from engine.treerank import SimilarityTreeRank as cls
    elif name == "ranking_forest":
        from engine.treerank import RankingForest as cls
    else:
        from engine.simforest import SimilarityForest as cls
    return cls.from_state(state), meta


def predict_for_items(conn: Redis, study_id: str, name: str,
                      new_items: Iterable[Item]) -> tuple[list[str], list[str], np.ndarray]:
    """Predictions between new items (with the same features) and the study's items: distances for
    SMERF, similarity scores for TreeRank. Returns (new ids, study item ids, (n_new, n_study) matrix)."""
    if name not in ("smerf", "treerank", "ranking_forest"):
        raise ModelError(f"{name} does not predict from features; use smerf, treerank or ranking_forest")
    model, meta = load_model(conn, study_id, name)
    items, names, X = _study_features(conn, study_id)
    try:
        new_names, rows = feature_matrix(list(new_items))
    except StudyError as exc:
        raise ModelError(f"the new items: {exc}") from None
    if new_names != meta["feature_names"]:
        raise ModelError(f"the new items have features {', '.join(new_names)} but the model was trained on "
                         f"{', '.join(meta['feature_names'])}")
    X_new = np.asarray(rows, dtype=np.float64)
    values = model.predict(X_new, X) if name == "smerf" else model.score_matrix(X_new, X)
    return [i.id for i in new_items], [i.id for i in items], np.asarray(values)
