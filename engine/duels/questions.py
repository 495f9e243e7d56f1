"""Candidate duels' question choice: least-asked heads first, each asking the least-asked pair of
its alive shortlist (eliminating candidates beaten with confidence on the way), random or exploring
questions for the embedding, and the candidates a screen of several items shows.

Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import heapq
import numbers
from typing import TYPE_CHECKING

import numpy as np

from ..graph import NO_NEIGHBOR
from ..random_triplets import candidate_pairs
from . import refits, scores
from .dims import coin_flips, duel_trust
from .scores import _beats, _log_kernel

if TYPE_CHECKING:
    from .parts import Params, Parts

#: where single duels are coin flips (``coin_``, see :mod:`.dims`): the share of questions asked to
#: place items in the embedding (the active embedding's rule over ``COIN_PAIRS`` random pairs)
#: instead of duels, ...
COIN_EXPLORE = 0.9
COIN_PAIRS = 50
#: ... of the questions that test trusted features elsewhere (``explore``), the share asked in that regime: a
#: quarter (a fortieth of the questions). All of it cost the alien eggs' parameter hit@3 at 50 answers per item in
#: 3 of 4 seeds (.97 / .79 / .96; the tests' easy far answers let a fit tie with the features' map); a quarter
#: costs nothing measurable there (4 seeds, to 100 answers per item) and still drops contradicted features
COIN_TESTS = 0.25
#: ... an exploring pair's weight halves where its nearer item ranks n / COIN_NEAR from the head
COIN_NEAR = 20.0
#: how many extra asks a pair at the bottom of the ranking waits for, against the top pair
FOCUS = 2.0
#: most entries (rows x items, 16 bytes each) of the fit's rows kept for exploring questions between refits
ROW_CACHE_ENTRIES = 1_000_000
#: items up to which an exploring question ranks the pair from the head's whole row of the fit (cached);
#: above, from ``RANK_SAMPLE`` reference items (O(RANK_SAMPLE) per question, not O(n log n))
EXACT_RANK_ITEMS = 5000
RANK_SAMPLE = 1024
#: How many likely neighbours :func:`screen_candidates` gives a screen planner at most
SCREEN_CANDIDATES = 16
#: Where near duels are coin flips, screens show references from the head's this many nearest (0: never)
SCREEN_SPREAD = 24
#: Screens that test trusted features again (:func:`screen_of_tests`), as a share of ``explore``: a whole
#: screen for about two tests, where the duels' random share is one question for one
SCREEN_TEST_SHARE = 0.5
#: most heads :func:`next_questions` scores together when one of them comes up
PLAN_CHUNK = 64

_TRIU: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _triu(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(iu, ju, 1e-6 (iu + ju)) of ``np.triu_indices(m, 1)``, computed once per m (read only)."""
    out = _TRIU.get(m)
    if out is None:
        iu, ju = np.triu_indices(m, 1)
        tie = 1e-6 * (iu + ju)
        for a in (iu, ju, tie):
            a.flags.writeable = False
        out = _TRIU[m] = (iu, ju, tie)
    return out


def next_questions(s: Parts, params: Params, budget: int) -> list[tuple[int, int, int]]:
    """Up to ``budget`` distinct questions, least-asked heads first (outside a pool at most one per
    head, see ``pool``); counted as pending."""
    if isinstance(budget, bool) or not isinstance(budget, (numbers.Integral, np.integer)):
        raise ValueError(f"budget must be an integer, got {budget!r}")
    budget = int(budget)
    if budget <= 0:
        return []
    refits.judge_features(s, params)
    if refits.needs_refit(s, params):
        refits.refresh(s, params)
    n = params.n_items
    draw = s.rng.permutation(n)
    # heads by (questions asked, tie), fed into the heap only when they come next: the same order
    # as a heap of every head, without a Python tuple per item (at 50,000 items that took ~70 ms)
    loads = s.duels.asked.copy()
    queue = np.lexsort((draw, loads))
    fed = 0
    heap: list[tuple[int, int, int]] = []
    out: list[tuple[int, int, int]] = []
    taken: set = set()
    cache: dict[int, tuple] = {}  # per head scored: :func:`score_heads`
    orders: dict[int, tuple] = {}  # per head asked a duel: (its duels with the pending ones, pair order)
    pending = s.duels.pending_by_head()
    parked = []  # heads with nothing new to ask in this call (certified or all pairs taken)
    trust = duel_trust(s, params) if s.fit.kappa is None else 0.0
    coin = coin_flips(s)
    explore, pairs = (COIN_EXPLORE, params.explore_pairs or COIN_PAIRS) if coin else (params.explore,
                                                                                params.explore_pairs)
    once = not params.pool  # one question per head in this call
    while len(out) < budget and (heap or fed < n):
        while fed < n and (not heap or (int(loads[queue[fed]]), int(draw[queue[fed]])) < heap[0][:2]):
            g = int(queue[fed])
            heapq.heappush(heap, (int(loads[g]), int(draw[g]), g))
            fed += 1
        load, t, h = heapq.heappop(heap)
        warm = not refits.started(s) or s.duels.answered[h] < refits.warmup_of(s, params)
        if warm and s.prior is not None and s.prior.testing:
            # (the features are tested before they are used: see engine.duels.priors)
            q = s.prior.test_question(h, s.rng, taken)
            s.prior.asked(q)
        elif warm or s.rng.random() < explore:
            if not warm and s.prior is not None and s.prior.trusted and (
                    not pairs or s.fit.embedding is None or s.rng.random() < COIN_TESTS * params.explore / explore):
                # (trusted features are tested on: the random share is their test questions; where exploring
                # pairs take that share, the coin-flip regime, ``COIN_TESTS`` of it)
                q = s.prior.test_question(h, s.rng, taken)
                s.prior.asked(q)
            elif warm or not pairs or s.fit.embedding is None:
                q = random_question(s, params, h, taken)
            else:
                q = exploring_question(s, params, h, taken)
        else:
            if h not in cache:
                # this head and the next ones the call may ask, scored together (per head, numpy on
                # shortlists of ~12 was bound by call overhead: a fifth of a busy live pass)
                chunk = {h: None}
                # (about twice the duels the rest of the call asks, in the order the heads come up:
                # a head asked an exploring question wastes its row)
                room = min(PLAN_CHUNK, 1 + int(2.0 * (1.0 - explore) * (budget - len(out))))
                if room > 1:
                    nxt = heapq.nsmallest(room, heap)
                    nxt += [(int(loads[g]), int(draw[g]), int(g)) for g in queue[fed: fed + room]]
                    for _, _, g in sorted(nxt):
                        if len(chunk) >= room:
                            break
                        if g not in cache and s.duels.answered[g] >= refits.warmup_of(s, params):
                            chunk[g] = None
                score_heads(s, params, np.fromiter(chunk, np.int64, len(chunk)), cache)
            cands, N, pos, certified, dropping = cache[h]
            if dropping is not None:  # (its beaten candidates leave when it is asked, not when scored)
                drop(s, h, *dropping)
                cache[h] = (cands, N, pos, certified, None)
            m = len(cands)
            if certified or m < 2:
                parked.append(h)
                continue
            if h not in orders:
                orders[h] = pair_order(h, cands, N, pos, pending.get(h), trust)
            Np, order = orders[h]
            # unasked pairs before any repeat (a repeat can only sharpen one pair, a new pair
            # also tells how the pair ranks against the rest; on recorded data a repeat says
            # nothing new); among them, and then among repeats, the least-asked, where pairs
            # of the current leaders count as less asked (FOCUS): the leader against each
            # challenger in turn (best first), then the runner-up against the rest, ...;
            # ties to the pair nearest the head
            iu, ju, tie = _triu(m)
            # (the same sum, in the same order, for every trust: the pair order part per head)
            key = Np[iu, ju] * (1.0 + FOCUS) + order + tie
            q = None
            for idx in np.argsort(key, kind="stable"):
                a, b = int(cands[iu[idx]]), int(cands[ju[idx]])
                if (h, min(a, b), max(a, b)) not in taken:
                    Np[iu[idx], ju[idx]] += 1
                    q = (h, a, b)
                    break
            if q is None:
                parked.append(h)
                continue
        key3 = (q[0], min(q[1], q[2]), max(q[1], q[2]))
        taken.add(key3)
        s.duels.issue(*key3)
        pending.setdefault(h, []).append(key3[1:])
        out.append(q)
        if not once:
            heapq.heappush(heap, (load + 1, t, h))
    return out


def alive(s: Parts, params: Params, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Shortlist of h without eliminated candidates, plus its duel matrices and whether h is
    certified (:func:`certified`): :func:`alive_rows` of the one head."""
    rows, W, N, valid, certified, _ = alive_rows(s, params, np.array([h], np.int64))
    m = int(valid[0].sum())
    return rows[0, :m], W[0, :m, :m], N[0, :m, :m], bool(certified[0])


def alive_rows(s: Parts, params: Params, heads: np.ndarray, eliminate: bool = True) -> tuple:
    """The heads' shortlists without the candidates beaten with confidence (anytime bound): rows,
    W, N, valid as :func:`batch_matrices` gives them, whether each head is certified
    (:func:`batch_certified`), and {index in heads: the candidates it lost}. Those leave the
    shortlists for good (:func:`drop`) here, or with ``eliminate=False`` when the caller says."""
    rows = s.short.cands[heads]
    W, N, valid = scores.batch_matrices(s, heads, rows)
    m = valid.sum(axis=1)
    # some alive j beats candidate i with confidence
    lost = _beats(W, N, params.delta, np.maximum(1, m * (m - 1) // 2)[:, None, None]).any(axis=1)
    lost &= valid & (m > 1)[:, None]
    hit = np.flatnonzero(lost.any(axis=1))
    gone = {}
    if len(hit):
        rows = rows.copy()
        for i in hit.tolist():
            keep = rows[i][valid[i] & ~lost[i]]
            gone[i] = rows[i][lost[i]]
            rows[i] = np.concatenate([keep, np.full(rows.shape[1] - len(keep), NO_NEIGHBOR)])
        W[hit], N[hit], valid[hit] = scores.batch_matrices(s, heads[hit], rows[hit])
    certified = scores.batch_certified(s, params, heads, W, N, valid)
    certified[hit] |= valid[hit].sum(axis=1) == 1  # the last one left after eliminations
    if eliminate:
        for i, out in gone.items():
            drop(s, int(heads[i]), rows[i], out)
    return rows, W, N, valid, certified, gone


def drop(s: Parts, h: int, row: np.ndarray, gone: np.ndarray) -> None:
    """Candidates ``gone`` of head h are out of its shortlist for good; ``row`` is what is left."""
    s.short.eliminate(h, gone)
    s.short.cands[h] = row


def score_heads(s: Parts, params: Params, heads: np.ndarray, cache: dict) -> None:
    """cache[h] for each of ``heads`` (:func:`next_questions`): its alive candidates
    (:func:`alive_rows`), their duel counts, each one's place in its ranking (by score, ties to
    the shortlist order), whether it is certified, and the eliminations to make when it is asked
    a duel (so that a head scored but then asked an exploring question keeps its shortlist)."""
    rows, W, N, valid, certified, gone = alive_rows(s, params, heads, eliminate=False)
    score, _ = scores.score_matrices(s, params, heads, rows, W, N, valid)
    place = np.argsort(np.where(valid, -score, np.inf), axis=1, kind="stable")  # padding last
    pos = np.empty(place.shape)
    np.put_along_axis(pos, place, np.broadcast_to(np.arange(rows.shape[1], dtype=np.float64), place.shape),
                      axis=1)
    m = valid.sum(axis=1).tolist()
    for i, h in enumerate(heads.tolist()):
        cache[h] = (rows[i, : m[i]], N[i, : m[i], : m[i]], pos[i, : m[i]], bool(certified[i]),
                    (rows[i], gone[i]) if i in gone else None)


def pair_order(h: int, cands: np.ndarray, N: np.ndarray, pos: np.ndarray, pairs: list | None,
                trust: float) -> tuple[np.ndarray, np.ndarray]:
    """(N plus the pending duels of pairs of cands, the order part of each pair's key): the leader
    against each challenger in turn where trust > 1/2, else by the sum of the two places."""
    m = len(cands)
    iu, ju, _ = _triu(m)
    pi, pj = pos[iu], pos[ju]
    if trust > 0.5:
        order = FOCUS * (np.minimum(pi, pj) * m + np.maximum(pi, pj)) / (m * m)
    else:
        order = FOCUS * (pi + pj) / (2 * max(m - 1, 1))
    return add_pending(h, cands, N, pairs), order


def add_pending(h: int, cands: np.ndarray, N: np.ndarray, pairs: list | None) -> np.ndarray:
    """N plus the pending duels of pairs of cands (``pairs`` from :func:`pending_by_head`)."""
    Np = N.copy()
    if pairs:
        at = {int(c): i for i, c in enumerate(cands)}
        for a, b in pairs:
            i, j = at.get(a), at.get(b)
            if i is not None and j is not None:
                Np[i, j] += 1
                Np[j, i] += 1
    return Np


def random_question(s: Parts, params: Params, h: int, taken: set) -> tuple[int, int, int]:
    n = params.n_items
    for _ in range(8):
        a, b = (int(x) for x in s.rng.choice(n - 1, size=2, replace=False))
        a, b = a + (a >= h), b + (b >= h)
        if (h, min(a, b), max(a, b)) not in taken:
            break
    return (h, a, b)


def exploring_question(s: Parts, params: Params, h: int, taken: set) -> tuple[int, int, int]:
    """Of ``explore_pairs`` random pairs, the one the fit is least sure of, weighted towards
    pairs holding a plausible neighbour: p (1 - p) / (1 + r / r0), r the nearer one's rank
    from h in the fit, r0 = n / ``COIN_NEAR`` (the active embedding's rule); on a line, the one
    the fit is least sure of among those with an item on either side of h."""
    n, c = params.n_items, params.explore_pairs or COIN_PAIRS
    X = s.fit.embedding
    a, b = candidate_pairs(s.rng, n, h, c)
    if n > EXACT_RANK_ITEMS:
        # a large study: the pair's kernels only, and each item's rank from h estimated from a
        # sample of the items (a whole row and its sort cost O(n log n) per question: ~4 ms at
        # 50,000 items, seconds for a pass that plans thousands of questions)
        lk_a, lk_b = _log_kernel(X, h, a), _log_kernel(X, h, b)
        rank_a, rank_b = sampled_ranks(s, params, X, h, lk_a), sampled_ranks(s, params, X, h, lk_b)
    else:
        if s.fit.rows_of is not X or (len(s.fit.rows) + 1) * n > ROW_CACHE_ENTRIES:
            # the row and ranks change only with the fit: kept until embedding_ is replaced
            s.fit.rows, s.fit.rows_of = {}, X
        row = s.fit.rows.get(h)
        if row is None:
            lk = _log_kernel(X, h, np.arange(n))
            lk[h] = np.inf
            rank = np.empty(n, np.int64)
            rank[np.argsort(-lk, kind="stable")] = np.arange(n)
            lk.flags.writeable = rank.flags.writeable = False
            row = s.fit.rows[h] = (lk, rank)
        lk, rank = row
        lk_a, lk_b, rank_a, rank_b = lk[a], lk[b], rank[a], rank[b]
    p = 1.0 / (1.0 + np.exp(np.minimum(np.maximum(lk_b - lk_a, -700.0), 700.0)))  # np.clip, cheaper
    if X.shape[1] == 1:
        # on a line only a pair on both sides of h says where h lies (the answer's odds then move
        # with h's place, whatever the pair's spread; a pair on one side tells only which of the
        # two is nearer): the most uncertain of those (on the alien eggs hit@3 at 50 / 100 / 200
        # answers per item .30 / .46 / .68 against .29 / .40 / .60 with the weight to near items;
        # choosing among 100 or 200 random pairs did worse, .36 / .30 at 100)
        side = X[:, 0] - X[h, 0]
        score = p * (1.0 - p) * ((side[a] > 0) != (side[b] > 0))
    else:
        score = p * (1.0 - p) / (1.0 + np.minimum(rank_a, rank_b) / max(1.0, n / COIN_NEAR))
    j = int(np.argmax(score))  # the first of the stable order below, unless taken
    x, y = int(a[j]), int(b[j])
    if score[j] == score[j] and (h, min(x, y), max(x, y)) not in taken:
        return (h, x, y)
    for j in np.argsort(-score, kind="stable"):
        x, y = int(a[j]), int(b[j])
        if (h, min(x, y), max(x, y)) not in taken:
            return (h, x, y)
    return (h, int(a[0]), int(b[0]))


def sampled_ranks(s: Parts, params: Params, X: np.ndarray, h: int, lk: np.ndarray) -> np.ndarray:
    """Estimated ranks from h (0: nearest) of items whose log-kernels from h are ``lk``: the share
    of ``RANK_SAMPLE`` reference items (drawn once per fit, a fixed seed: the planner's own random
    stream is not touched) nearer to h, times n. Its error (n / RANK_SAMPLE items, ~50 at 50,000)
    is far below the weight's scale, n / ``COIN_NEAR``."""
    if s.fit.rank_ref_of is not X:
        gen = np.random.default_rng([params.n_items, int(s.fit.n_fits)])
        s.fit.rank_ref = np.sort(gen.choice(params.n_items, size=min(RANK_SAMPLE, params.n_items), replace=False))
        s.fit.rank_ref_of = X
    ref = s.fit.rank_ref[s.fit.rank_ref != h]
    near = np.sort(-_log_kernel(X, h, ref))  # ascending: nearest first
    # (+1: h itself ranks 0 in the exact row, its nearest other item 1)
    return 1.0 + np.searchsorted(near, -lk, side="left") * (params.n_items - 1) / max(len(ref), 1)


def screen_candidates(s: Parts, params: Params, h: int) -> tuple[np.ndarray, bool]:
    """h's likeliest neighbours, best first, for a screen showing several at once: its alive
    shortlist by duel score, then the nearest items of the fit outside it (up to
    ``SCREEN_CANDIDATES`` in all); and whether h is certified. While the features are tested: its
    nearest in the features and random items in turn (a screen's answer holds test questions).
    Empty while h is warming up otherwise (no fit yet, or fewer than ``warmup`` answers for it): a
    screen then shows random items."""
    h = int(h)
    if s.prior is not None and s.prior.testing:
        return screen_while_tested(s, params, h), False
    if not refits.started(s) or s.duels.answered[h] < refits.warmup_of(s, params):
        return np.empty(0, np.int64), False
    X = s.fit.embedding
    if SCREEN_SPREAD and X is not None and (s.fit.coin or X.shape[1] == 1):
        # near duels are coin flips (items people can hardly tell apart up close): a screen of the
        # head's nearest says little, one spread over its wider neighbourhood places it
        lk = _log_kernel(X, h, np.arange(params.n_items))
        lk[h] = -np.inf
        span = min(SCREEN_SPREAD, params.n_items - 1)
        near = np.argpartition(-lk, span - 1)[:span]
        near = near[np.lexsort((near, -lk[near]))]
        return near[s.rng.permutation(span)].astype(np.int64), False
    _, _, _, certified = alive(s, params, h)
    ranked, _, _ = scores.ranking(s, params, h)
    out = [int(c) for c in ranked]
    if X is not None and len(out) < SCREEN_CANDIDATES:
        lk = _log_kernel(X, h, np.arange(params.n_items))
        lk[h] = -np.inf
        gone = s.short.eliminated.get(h, ())
        want = SCREEN_CANDIDATES + len(out) + len(gone) + 1
        near = np.argpartition(-lk, min(want, params.n_items - 1))[:want]
        for c in near[np.lexsort((near, -lk[near]))]:
            c = int(c)
            if len(out) >= SCREEN_CANDIDATES:
                break
            if c != h and c not in out and c not in gone:
                out.append(c)
    elif X is None and s.prior is not None and len(out) < SCREEN_CANDIDATES:
        # before the first fit: the nearest in the features
        gone = s.short.eliminated.get(h, ())
        for c in s.prior.neighbors(SCREEN_CANDIDATES + len(gone) + 1)[h].tolist():
            if len(out) >= SCREEN_CANDIDATES:
                break
            if c not in out and c not in gone:
                out.append(c)
    return np.asarray(out, np.int64), bool(certified)


def screen_while_tested(s: Parts, params: Params, h: int) -> np.ndarray:
    """Candidates of a screen of head h while the features are tested: its nearest in the features
    (from a random place among those its tests take) and random items outside them, in turn."""
    n = params.n_items
    near = s.prior.neighbors(s.prior.test_near)[h]
    k = len(near)
    start = int(s.rng.integers(k))
    feats = near[(start + np.arange(k)) % k]
    outside = np.setdiff1d(np.arange(n), np.append(near, h))
    rand = s.rng.permutation(outside)[:k]
    out = np.empty(len(feats) + len(rand), np.int64)
    m = min(len(feats), len(rand))
    out[: 2 * m: 2], out[1: 2 * m: 2] = feats[:m], rand[:m]
    out[2 * m:] = np.concatenate([feats[m:], rand[m:]])
    return out[:SCREEN_CANDIDATES]


def screen_of_tests(s: Parts, params: Params, h: int, size: int) -> np.ndarray | None:
    """Once the features are trusted, a screen of head h that tests them again, for ``SCREEN_TEST_SHARE``
    of h's screens (None for the others, while they are not trusted and in the coin-flip regime): the two
    items of test questions (one of h's nearest in the features, a random item outside them; no item twice)
    in turn, up to ``size`` items, each question remembered as asked. With only test items shown, a pick of
    either item of a pair answers that pair's test (about two pairs of an 8-rank-2 screen), judged as the
    duels' own test questions are (:meth:`~.priors.FeaturePrior.judge`)."""
    if s.prior is None or not s.prior.trusted or s.fit.coin or s.rng.random() >= SCREEN_TEST_SHARE * params.explore:
        return None  # (not where near duels are coin flips: a screen there is spread to place the head)
    out: list[int] = []
    for _ in range(2 * size):
        if len(out) + 2 > size:
            break
        q = s.prior.test_question(h, s.rng, set())
        if q[1] in out or q[2] in out:
            continue
        s.prior.asked(q)
        out += [q[1], q[2]]
    return np.asarray(out, np.int64)
