"""Candidate duels' feature prior: the items' features (:mod:`engine.features`) are first tested on
questions of their own (a feature neighbour against a random item); once they pass, they give the first
embedding, feed every refit as a learned map the answers can overrule and keep a share of each shortlist;
features that fail leave a study that goes on as one without them, the tests its warm-up, and so do
features that pass and then fail the tests that go on (the random share of the questions).

Owned by :class:`~engine.duels.planner.CandidateDuels` as ``prior_`` (None without features); it holds
its own data and state. Numpy/scipy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Self

import numpy as np
from numpy.typing import ArrayLike

from ..features import PRIOR_STIFFNESS, feature_neighbors, feature_space, triplet_agreement
from ..graph import NO_NEIGHBOR

#: answers per item after the tests passed before the first refit of a study with features (until then: duels
#: among the features' nearest; a first fit on the tests alone, easy far answers, let a t-STE fit tie with the
#: features' map on near answers, and the alien eggs' parameter lost .08 / .19 at 25 / 50 answers per item)
FIRST_FIT = 1.0
#: what an item's offset from where its features map it costs in a refit (``PRIOR_STIFFNESS``, read
#: here so a test or a benchmark can patch it for duels alone)
STIFFNESS = PRIOR_STIFFNESS
#: Trusted features hold the fits by ``STIFFNESS`` where the neighbour wins ``STIFF_SHARE`` of their tests or
#: more, by less in proportion to (share - .5) / (``STIFF_SHARE`` - .5) below (at least ``STIFF_FLOOR`` of it):
#: weak features (Food-100's ingredients, share ~.57) held at full stiffness cost hit@3 .056 at 25 answers per
#: item where they were trusted (16 seeds), as the fits kept items near where the features put them
STIFF_SHARE = 0.73
STIFF_FLOOR = 0.1
#: share of a rebuilt shortlist's new candidates taken from the items nearest in the features (while
#: they are trusted): the features know neighbours a low-dimensional fit folds away
SHARE = 0.34
#: studies of more than ``LARGE_ITEMS`` items take ``LARGE_SHARE`` of each rebuilt shortlist from the features.
#: There a fit has few answers per item against many items: each item's offset from where its features put it
#: is known only roughly, and items scatter among others' neighbours (at 10,000 clustered items, features of
#: local agreement .7, 10 answers per item: 1-NN hit@3 in a 4-D or 8-D fit .17-.34, in the features' map .46)
LARGE_ITEMS = 5000
LARGE_SHARE = 0.5
#: ... and find each item's this many nearest in the features once, the candidates its shortlists come from
#: below ``engine.duels.dims.MAP_UNTIL`` answers per item
LARGE_NEAR = 32
#: the features are judged before any fit, on test questions that pit one of the head's ``TEST_NEAR``
#: nearest in the features (a quarter of the others in a study of fewer items) against a random item outside
#: them (chosen whatever the answers say, so the share the feature neighbour wins is an unbiased test: .50
#: for pure noise, .63 / .73 / .83 for features of triplet agreement .6 / .7 / .8 at 100 clustered items;
#: the duels' own answers, asked where earlier answers led, made noise neighbours win .6-.7: only the answers
#: of test questions count, see :meth:`FeaturePrior.asked`). Where the features are noise such a question is
#: a random triplet, the question a study without features warms up with: the tests cost little when the
#: features fail them. Judged from ``TEST_MIN`` scored tests (one per two items in a smaller study) and again
#: each time they grew by ``TEST_GROWTH``: trusted when the neighbour wins more often than chance at the
#: look's level (:func:`trust_z`), dropped when by less than ``DROP_Z`` standard errors, and dropped at the
#: end of the warm-up a study without features spends if neither was decided by then.
TEST_NEAR = 16
TEST_MIN = 100
TEST_GROWTH = 0.25
#: the chance that features of pure noise are ever trusted, over all looks: look k (0, 1, ...) trusts at the
#: one-sided level ``TRUST_ALPHA / 2**(k + 1)`` (z 2.24, 2.50, 2.73, 2.96, ...), so the looks' levels sum to
#: at most ``TRUST_ALPHA`` however many looks a study's calls make. With z >= 2.0 at every look, pure noise
#: was trusted at 10,000 items in 2 of 40 seeds (seven looks offline; 6.1% of 4,000 runs of the looks,
#: ``benchmarks/features_prior.py --false-trust --trust-z 2.0``), now in none of the 40 and 1.6-2.1% of such
#: runs at 100 to 10,000 items, offline or in batches of 200
TRUST_ALPHA = 0.025
DROP_Z = 0.5
#: Trusted is not trusted for good: the random share of the duels' questions (``explore``) are test
#: questions while the features are trusted, judged on their own (without the tests that made them trusted)
#: at every look by a sequential probability ratio: dropped once they are ``RECHECK_ODDS`` times likelier
#: under pure noise (share .5) than under features whose neighbour wins ``RECHECK_SHARE`` of the tests. Then
#: features that predict as well as that are dropped at most 1 / ``RECHECK_ODDS`` of the time however long
#: the study goes on, and pure noise trusted by chance falls away after ~230 tests (the ratio's drift; below a
#: share of ~.55 features fall away, above it they stay); the study goes on as one without them.
RECHECK_SHARE = 0.6
RECHECK_ODDS = 100.0
#: Test questions waiting for their answers are remembered up to ``PENDING_PER_ITEM`` per item (the oldest
#: forgotten first: a live study's expired questions)
PENDING_PER_ITEM = 4
#: spread of the first embedding (the features' leading components, the first of unit spread)
START_SCALE = 1.0


def trust_z(look: int) -> float:
    """The z a look at the tests must reach to trust the features: look 0 at the one-sided level
    ``TRUST_ALPHA / 2``, each later look at half the level of the one before (see :data:`TRUST_ALPHA`)."""
    return NormalDist().inv_cdf(1.0 - TRUST_ALPHA * 0.5 ** (int(look) + 1))


def tests_z(right: float, seen: float) -> float:
    """Standard errors by which the feature neighbour won more than half of ``seen`` tests (0 without any)."""
    return (right / seen - 0.5) * 2.0 * math.sqrt(seen) if seen > 0 else 0.0


class FeaturePrior:
    """The features of a study's items in the space the learner reads them in (``space_``, float32
    (n_items, p), see :func:`engine.features.feature_space`) and how well they predicted the answers
    that arrived while they were tested (``scores_``: [predicted right, scored]; ``tests_``: the same on the
    test questions, see :data:`TEST_NEAR`)."""

    VERSION = 1

    def __init__(self, space: np.ndarray) -> None:
        self.space_ = np.asarray(space, np.float32)
        self.scores_ = np.zeros(2)
        self.tests_ = np.zeros(2)  # the same on the answers of a feature neighbour against another item
        self.dropped_ = False  # found to predict nothing: the learner goes on as one without features
        self.decided_ = False  # found to predict the answers: used from here on (and tested on)
        self.judged_ = 0  # answers (triplets) scored so far
        self.looked_ = 0  # scored tests at the last judgement
        self.looks_ = 0  # looks at the tests before they were trusted or dropped (see trust_z)
        self.trusted_at_ = np.zeros(2)  # tests_ when they were trusted (later tests are judged on their own)
        self.trusted_on_ = 0  # answers (triplets) scored when they were trusted (the first fit counts from it)
        self.map_earned_ = False  # the features' map was chosen on fresh answers (see Dimensions._best_dim_index)
        # test questions asked and not answered yet: {(h, lower, higher): how many}
        self.pending_: dict[tuple[int, int, int], int] = {}
        # each item's nearest in the features (computed once, saved: at 50,000 items it takes ~30 s)
        self._near: np.ndarray | None = None
        self._hub_weights: np.ndarray | None = None  # per item, 1 / how many count it a test neighbour

    @classmethod
    def from_features(cls, features: ArrayLike, n_items: int) -> Self:
        return cls(feature_space(features, n_items))

    @property
    def n_items(self) -> int:
        return len(self.space_)

    def points(self) -> np.ndarray:
        """The space as float64 (what the fits read)."""
        return self.space_.astype(np.float64)

    @property
    def widest(self) -> int:
        """Nearest in the features found at once (``LARGE_NEAR`` in a large study, whose shortlists come from
        them, else ``TEST_NEAR``), at most the other items."""
        return int(min(LARGE_NEAR if self.large else TEST_NEAR, self.n_items - 1))

    def neighbors(self, k: int) -> np.ndarray:
        """Each item's k nearest in the features, nearest first (computed once for the widest k asked)."""
        k = int(min(k, self.n_items - 1))
        if self._near is None or self._near.shape[1] < k:
            self._near = feature_neighbors(self.space_, max(k, self.widest))
        return self._near[:, :k]

    @property
    def test_near(self) -> int:
        """How many of a head's nearest in the features its tests pit against the others: ``TEST_NEAR``,
        a quarter of the other items in a smaller study (so there are items outside them)."""
        return int(min(TEST_NEAR, max(1, (self.n_items - 1) // 4)))

    def first_shortlists(self, m: int, width: int) -> np.ndarray:
        """Shortlists (n_items, width) before any answer: each item's m nearest in the features,
        ``NO_NEIGHBOR`` padding."""
        n = self.n_items
        m = int(min(m, n - 1, width))
        out = np.full((n, width), NO_NEIGHBOR, np.int64)
        out[:, :m] = self.neighbors(m)
        return out

    def test_question(self, h: int, rng: np.random.Generator, taken: set) -> tuple[int, int, int]:
        """A test question of head h: one of its ``TEST_NEAR`` nearest in the features against a random
        item outside them (redrawn a few times where the question was already taken). The neighbour is
        drawn in inverse proportion to how many items count it among their ``TEST_NEAR`` nearest: so every
        item is shown about as often as in random triplets (in pure noise some items are near to many,
        "hubs"; drawn uniformly, at 100 items their tests cost .05 at 5 answers per item)."""
        n = self.n_items
        near = self.neighbors(self.test_near)
        if self._hub_weights is None or len(self._hub_weights) != n:
            self._hub_weights = 1.0 / np.maximum(np.bincount(near.ravel(), minlength=n), 1)
        row = near[h]
        w = np.cumsum(self._hub_weights[row])
        q = None
        for _ in range(8):
            f = int(row[min(int(np.searchsorted(w, rng.random() * w[-1], side="right")), len(row) - 1)])
            r = int(rng.integers(n))
            for _ in range(8):
                if r != h and r not in row:
                    break
                r = int(rng.integers(n))
            if r == h or r == f:
                continue
            q = (h, f, r)
            if (h, min(f, r), max(f, r)) not in taken:
                break
        return q if q is not None else (h, int(row[0]), int(row[-1]))

    def asked(self, q: tuple[int, int, int]) -> None:
        """Remember a test question asked (``(h, a, b)``): its answer counts in ``tests_`` (:meth:`score`)."""
        key = (int(q[0]), int(min(q[1], q[2])), int(max(q[1], q[2])))
        self.pending_[key] = self.pending_.get(key, 0) + 1
        if len(self.pending_) > PENDING_PER_ITEM * self.n_items:
            del self.pending_[next(iter(self.pending_))]

    def start(self, dim: int) -> np.ndarray:
        """The first embedding in ``dim`` dimensions: the leading components (zeros past the last)."""
        X = np.zeros((self.n_items, dim))
        p = min(dim, self.space_.shape[1])
        X[:, :p] = self.space_[:, :p] * START_SCALE
        return X

    def score(self, fresh: np.ndarray) -> None:
        """Score the features on answers not scored yet (rows (i, j, k)): every answer (``scores_``), and
        those that pit one of the head's ``TEST_NEAR`` feature neighbours against another item (``tests_``):
        while the features are tested every such answer (every question is a test then, a screen's too),
        once trusted only the answers of test questions (:meth:`asked`), not the duels'."""
        fresh = np.asarray(fresh, np.int64).reshape(-1, 3)
        self.scores_ += triplet_agreement(self.space_, fresh)
        if not len(fresh):
            return
        near = self.neighbors(self.test_near)[fresh[:, 0]]
        won = (near == fresh[:, 1:2]).any(axis=1)
        lost = (near == fresh[:, 2:3]).any(axis=1)
        test = won != lost
        if self.pending_:
            for r in np.flatnonzero(test).tolist():
                h, j, k = (int(x) for x in fresh[r])
                key = (h, min(j, k), max(j, k))
                left = self.pending_.get(key, 0)
                if not left:
                    test[r] = self.testing
                elif left == 1:
                    del self.pending_[key]
                else:
                    self.pending_[key] = left - 1
        elif not self.testing:
            return
        self.tests_ += (int(won[test].sum()), int(test.sum()))

    @property
    def agreement(self) -> float:
        """Share of the scored answers the features predicted (nan before any)."""
        right, seen = self.scores_
        return float(right / seen) if seen > 0 else float("nan")

    @property
    def test_share(self) -> float | None:
        """How often a feature neighbour beat another item in the answers scored (None before any)."""
        right, seen = self.tests_
        return float(right / seen) if seen > 0 else None

    @property
    def trusted(self) -> bool:
        """Whether the features count (in the fits, the shortlists and the warm-up): from when the tests
        found them to predict the answers (:meth:`judge`) until the tests after that find they do not, and
        not while they are being tested."""
        return self.decided_ and not self.dropped_

    @property
    def testing(self) -> bool:
        """Whether the features are still being tested (neither trusted nor dropped)."""
        return not self.decided_ and not self.dropped_

    def judge(self, final: bool) -> bool | None:
        """The verdict of the tests scored so far: True (trusted), False (dropped) or None (as before);
        ``final`` (the warm-up is over, before they were trusted): True or False. Only from ``TEST_MIN``
        tests (one per two items in a smaller study; any number when final) and each time they grew by
        ``TEST_GROWTH`` since the last look; look k trusts from z :func:`trust_z` (k) on, so noise is
        trusted at most ``TRUST_ALPHA`` of the time over all looks. Once trusted, the tests since are judged
        on their own at every call: dropped (False) once ``RECHECK_ODDS`` times likelier noise than features
        of test share ``RECHECK_SHARE`` (see there), else None."""
        if self.dropped_:
            return False
        if self.decided_:
            right, seen = self.tests_ - self.trusted_at_
            odds = right * math.log(RECHECK_SHARE / 0.5) + (seen - right) * math.log((1.0 - RECHECK_SHARE) / 0.5)
            return False if odds <= -math.log(RECHECK_ODDS) else None
        right, seen = self.tests_
        if not final and (seen < min(TEST_MIN, self.n_items // 2) or seen < self.looked_ * (1.0 + TEST_GROWTH)):
            return None
        self.looked_ = int(seen)
        z = tests_z(right, seen)
        look, self.looks_ = self.looks_, self.looks_ + 1
        if z >= trust_z(look):
            return True
        if final or z < DROP_Z:
            return False
        return None

    def trust(self) -> None:
        """Trust the features (a verdict True of :meth:`judge`): the tests from here on are judged on their own."""
        self.decided_ = True
        self.trusted_at_ = self.tests_.copy()
        self.trusted_on_ = self.judged_

    def learned_map(self, X: np.ndarray) -> np.ndarray:
        """The map W (p, dim) the fits learned from the features to fitted coordinates ``X`` (n_items, dim):
        X = Z W + E read back as its least-squares map (as ``engine.embedding.fit_embedding`` splits a start)."""
        return np.linalg.lstsq(self.points(), np.asarray(X, np.float64), rcond=None)[0]

    @property
    def stiffness(self) -> float:
        """How firmly the features hold a fit (``fit_embedding``'s ``stiffness``): ``STIFFNESS`` for features as
        predictive as ``STIFF_SHARE`` or more in their tests, less for weaker ones (see there)."""
        share = self.test_share
        if share is None:
            return float(STIFFNESS)
        return float(STIFFNESS * min(1.0, max(STIFF_FLOOR, (share - 0.5) / (STIFF_SHARE - 0.5))))

    @property
    def large(self) -> bool:
        """Whether the study is large (more than ``LARGE_ITEMS`` items): the features count for more there
        (``LARGE_SHARE``; the map as the chosen dimension, ``engine.duels.dims.MAP_UNTIL``)."""
        return self.n_items > LARGE_ITEMS

    @property
    def share(self) -> float:
        """Share of a rebuilt shortlist taken from the features: ``SHARE``, ``LARGE_SHARE`` in a large study."""
        return LARGE_SHARE if self.large else SHARE

    def mix(self, near: np.ndarray, share: float | None = None) -> np.ndarray:
        """Rows of nearest items in the fit (n_items, k) with the features' nearest woven in: every
        1/``share``-th place holds the next feature neighbour; an item already in the row is padding
        (``n_items``, which callers skip)."""
        n, k = near.shape
        share = self.share if share is None else share
        extra = max(1, math.ceil(share * k))
        feats = self.neighbors(extra)
        width = k + feats.shape[1]
        step = max(2, round(1.0 / share))
        at_feature = (np.arange(width) % step) == step - 1
        at_feature[np.flatnonzero(at_feature)[feats.shape[1]:]] = False
        while at_feature.sum() < feats.shape[1]:  # (a short row: the rest of the feature neighbours at its end)
            at_feature[np.flatnonzero(~at_feature)[-1]] = True
        out = np.empty((n, width), np.int64)
        out[:, at_feature] = feats
        out[:, ~at_feature] = near
        # later copies of an item become padding (a stable sort keeps each item's first place first)
        order = np.argsort(out, axis=1, kind="stable")
        srt = np.take_along_axis(out, order, axis=1)
        dup = np.zeros_like(out, dtype=bool)
        np.put_along_axis(dup, order[:, 1:], srt[:, 1:] == srt[:, :-1], axis=1)
        return np.where(dup, n, out)

    def to_state(self) -> dict:
        return {"version": self.VERSION, "space": self.space_.copy(), "scores": self.scores_.copy(),
                "tests": self.tests_.copy(), "dropped": bool(self.dropped_), "decided": bool(self.decided_),
                "judged": int(self.judged_), "looked": int(self.looked_), "map_earned": bool(self.map_earned_),
                "looks": int(self.looks_), "trusted_at": self.trusted_at_.copy(), "trusted_on": int(self.trusted_on_),
                "pending": np.array([[*key, c] for key, c in self.pending_.items()], np.int64).reshape(-1, 4),
                "near": None if self._near is None else self._near.astype(np.int32)}

    @classmethod
    def from_state(cls, state: dict) -> Self:
        if state.get("version") != cls.VERSION:
            raise ValueError(f"feature prior state of version {state.get('version')}, not {cls.VERSION}")
        prior = cls(np.asarray(state["space"], np.float32))
        prior.scores_ = np.array(state["scores"], np.float64).reshape(2)
        prior.tests_ = np.array(state["tests"], np.float64).reshape(2)
        prior.dropped_ = bool(state["dropped"])
        # (a state saved before the features were tested before use: they were in use from the start)
        prior.decided_ = bool(state.get("decided", True))
        prior.judged_ = int(state.get("judged", 0))
        prior.looked_ = int(state.get("looked", 0))
        prior.map_earned_ = bool(state.get("map_earned", False))
        # (a state saved before the tests went on once trusted: judged again from the tests after its save)
        prior.looks_ = int(state.get("looks", 0))
        prior.trusted_at_ = np.array(state.get("trusted_at", prior.tests_ if prior.decided_ else np.zeros(2)),
                                     np.float64).reshape(2)
        prior.trusted_on_ = int(state.get("trusted_on", prior.judged_))
        pending = np.asarray(state.get("pending", np.zeros((0, 4))), np.int64).reshape(-1, 4)
        prior.pending_ = {(int(h), int(a), int(b)): int(c) for h, a, b, c in pending}
        near = state.get("near")
        prior._near = None if near is None else np.array(near, np.int64).reshape(len(prior.space_), -1)
        return prior
