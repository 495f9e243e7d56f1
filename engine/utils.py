"""Small helpers shared by every engine module: random state, checks, counter-based hashing,
the head of a saved state and the sorted code tables of the planners.

Must never import Flask, Redis or anything outside numpy/scipy.
"""
from __future__ import annotations

import numbers
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Self, TypeVar

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

#: What a ``random_state`` parameter accepts: None (fresh entropy), an integer seed or a Generator.
RandomState = int | np.integer | np.random.Generator | None
#: What a forest's ``max_features`` accepts: "sqrt", "log2", an int, a float in (0, 1] or None (all).
MaxFeatures = str | int | float | None
#: The key type of a dict of counts (:func:`take_one`).
K = TypeVar("K", bound=Hashable)


def check_random_state(seed: RandomState) -> np.random.Generator:
    """Turn ``seed`` into a ``numpy.random.Generator``.

    ``None`` gives fresh OS entropy, an int a reproducible generator, and a
    Generator is returned as it is (shared, like scikit-learn does).
    """
    if seed is None or isinstance(seed, (numbers.Integral, np.integer)):
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.Generator):
        return seed
    raise ValueError(f"random_state must be None, an int or a numpy Generator, not {seed!r}")


def generator_state(rng: np.random.Generator) -> dict:
    """JSON-safe snapshot of a PCG64 generator, so a restored planner draws the same numbers."""
    state = rng.bit_generator.state
    if state["bit_generator"] != "PCG64":
        raise ValueError("only PCG64 generators can be saved")
    return {
        "bit_generator": "PCG64",
        "state": {"state": str(state["state"]["state"]), "inc": str(state["state"]["inc"])},
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def generator_from_state(saved: dict) -> np.random.Generator:
    """Inverse of :func:`generator_state`."""
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int(saved["state"]["state"]), "inc": int(saved["state"]["inc"])},
        "has_uint32": int(saved["has_uint32"]),
        "uinteger": int(saved["uinteger"]),
    }
    return rng


def store_params(estimator: object, arguments: dict[str, Any]) -> None:
    """Set ``estimator.<name> = value`` for every argument of its ``__init__``, unchanged and
    unchecked (``_check_params`` checks them when they are used): the scikit-learn convention
    that keeps the signature the one list of an estimator's parameters. Called as the first
    statement of ``__init__``, as ``store_params(self, locals())``, so the arguments are all that
    ``locals()`` holds besides ``self``."""
    for name, value in arguments.items():
        if name not in ("self", "__class__"):  # (``__class__``: there when ``__init__`` calls super())
            setattr(estimator, name, value)


def take_one(counts: dict[K, int], key: K) -> bool:
    """Take one copy of ``key`` from ``counts`` (a multiset: positive counts, a key gone at 0);
    False, changing nothing, when there is none (e.g. issued questions, released once each)."""
    left = counts.get(key, 0)
    if not left:
        return False
    if left == 1:
        del counts[key]
    else:
        counts[key] = left - 1
    return True


def check_int(name: str, value: object, minimum: int = 1, allow_none: bool = False) -> int | None:
    """``value`` as an int if it is an integer (not a bool) >= ``minimum`` (or None when
    ``allow_none``); ValueError naming ``name`` otherwise. The one integer check of the engine."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise ValueError(f"{name} must be an integer{' or None' if allow_none else ''}, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_n_items(n_items: object) -> int:
    if not isinstance(n_items, (numbers.Integral, np.integer)) or isinstance(n_items, bool):
        raise ValueError(f"n_items must be an integer, not {n_items!r}")
    if n_items < 3:
        raise ValueError(f"a study needs at least 3 items, got n_items={n_items}")
    return int(n_items)


# Counter-based randomness shared by the forests: a node's draws are a pure function of its tree's
# seed and its path, never of the order in which answers arrived.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


#: the fields of a triplet row: a question, or an answer with its winner
_TRIPLET_FIELDS = {3: "(head, a, b)", 4: "(head, a, b, winner)"}


def check_triplets(rows: Iterable | np.ndarray, n_items: int, what: str = "triplet", width: int = 3,
                   head_range: tuple[int, int] | None = None) -> np.ndarray:
    """Triplet rows as an int64 array of shape (m, ``width``): questions ``(head, a, b)`` ("is head more
    like a or b?", also list-order ``(i, j, k)``) or, with ``width=4``, answers ``(head, a, b, winner)``.

    Every index is a whole number in ``0..n_items - 1`` (the head in ``head_range = (lo, hi)``, lo
    included, when given), head, a and b are three different items and the winner is a or b. The one
    check of triplets at the engine's boundary; ValueError naming ``what`` and the first bad row otherwise.
    """
    fields = _TRIPLET_FIELDS[width]
    if not isinstance(rows, np.ndarray):
        rows = list(rows)
    try:
        arr = np.asarray(rows)
    except ValueError:  # ragged rows
        raise ValueError(f"{what}s must be rows {fields} of item indices") from None
    if arr.size == 0:
        return np.empty((0, width), np.int64)
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{what}s must be rows {fields} of item indices, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        try:
            values = arr.astype(np.float64)
        except (TypeError, ValueError):
            values = np.full(arr.shape, np.nan)
        whole = (np.isfinite(values) & (values == np.round(values))).all(axis=1)
        if not whole.all():
            raise ValueError(f"{what} {tuple(arr[np.argmin(whole)].tolist())}: item indices must be whole numbers")
    arr = arr.astype(np.int64, copy=False)
    lo, hi = head_range if head_range is not None else (0, n_items)
    h, a, b = arr[:, 0], arr[:, 1], arr[:, 2]
    bad = (h < lo) | (h >= hi) | (arr[:, 1:] < 0).any(axis=1) | (arr[:, 1:] >= n_items).any(axis=1)
    if bad.any():
        where = f"0..{n_items - 1}" if head_range is None else f"0..{n_items - 1}, the head {lo}..{hi - 1}"
        raise ValueError(f"{what} {tuple(arr[np.argmax(bad)].tolist())}: item indices must lie in {where}")
    bad = (h == a) | (h == b) | (a == b)
    if bad.any():
        raise ValueError(f"{what} {tuple(arr[np.argmax(bad)].tolist())} needs three different items")
    if width == 4:
        bad = (arr[:, 3] != a) & (arr[:, 3] != b)
        if bad.any():
            raise ValueError(f"{what} {tuple(arr[np.argmax(bad)].tolist())}: the winner must be one of its two "
                             "candidates (a or b)")
    return arr


def mix64(z: ArrayLike) -> np.ndarray:
    """SplitMix64 finaliser, vectorised: a counter-based hash giving independent 64-bit words."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def unit_floats(words: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1) from 64-bit words (their top 53 bits over 2**53)."""
    return (np.asarray(words, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def child_keys(keys: np.ndarray, side: int) -> np.ndarray:
    """The keys of the children on ``side`` (0 or 1) of nodes with ``keys``."""
    with np.errstate(over="ignore"):
        return mix64(np.asarray(keys, dtype=np.uint64) * np.uint64(2) + np.uint64(side + 1))


def group_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Indices where a new run of equal values starts in a sorted array."""
    if sorted_keys.size == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])


# ----------------------------------------------------------------------------------------
# saved state: the envelope (class, version, params), learned arrays and answer counters
# ----------------------------------------------------------------------------------------
def json_seed(random_state: RandomState) -> int | None:
    """``random_state`` as saved in a state's params: the int itself, else None (a Generator or
    fresh entropy cannot be written down; the learned seeds are saved instead)."""
    if isinstance(random_state, (numbers.Integral, np.integer)):
        return int(random_state)
    return None


def check_state(state: dict, cls_name: str, versions: Iterable[int]) -> int:
    """The version of ``state`` once it is known to be a saved ``cls_name`` of one of the
    ``versions`` this code reads: the one check of a saved state's class and version (every planner's
    and estimator's ``from_state``). ValueError otherwise, in the same words everywhere:
    "state is of ANN v1, not CandidateDuels v5"."""
    versions = tuple(versions)
    if not isinstance(state, Mapping) or state.get("class") != cls_name or state.get("version") not in versions:
        found = f"{state.get('class')} v{state.get('version')}" if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"state is of {found}, not {cls_name} v{' or v'.join(str(v) for v in versions)}")
    return state["version"]


def planner_from_state(cls: Any, state: dict, params: bool = True) -> Any:
    """A new planner of class ``cls`` for a saved ``state`` of it, its learned state not yet loaded: the
    state's class and version checked (:func:`check_state`, against ``cls.VERSION``), the planner built
    of the state's ``n_items`` (and its ``params``, where ``cls`` saves them) and its random generator
    (``rng_``) restored. The first steps of a planner's ``from_state``."""
    check_state(state, cls.__name__, (cls.VERSION,))
    planner = cls(int(state["n_items"]), **(state["params"] if params else {}))
    planner.rng_ = generator_from_state(state["rng"])
    return planner


def arrays_state(source: object, names: Iterable[str], prefix: str = "") -> dict:
    """``{prefix + name: a copy of source.<name>_}`` for each of ``names``."""
    return {prefix + name: getattr(source, name + "_").copy() for name in names}


def array_from_state(value: ArrayLike, dtype: DTypeLike, shape: tuple[int, ...] = ()) -> np.ndarray:
    """A fresh ndarray of ``value`` as ``dtype``; with a ``shape`` (of one row), rows of that shape."""
    arr = np.asarray(value, dtype)
    return (arr.reshape(-1, *shape) if shape else arr).copy()


def load_arrays(target: object, state: dict, dtypes: dict, prefix: str = "") -> None:
    """Set ``target.<name>_`` to a fresh ndarray of ``state[prefix + name]`` for every
    ``name: dtype`` of ``dtypes`` (the inverse of :func:`arrays_state`)."""
    for name, dtype in dtypes.items():
        setattr(target, name + "_", array_from_state(state[prefix + name], dtype))


def load_counters(target: object, names: Iterable[str], state: dict | None = None) -> None:
    """Set ``target.<name>_`` to ``int(state[name])`` for each of ``names`` (a planner's answer
    counters), or to 0 without a ``state``."""
    for name in names:
        setattr(target, name + "_", 0 if state is None else int(state[name]))


def counters_state(source: object, names: Iterable[str]) -> dict:
    """``{name: int(source.<name>_)}`` for each of ``names``: the counters' part of a state."""
    return {name: int(getattr(source, name + "_")) for name in names}


class StateMixin:
    """``to_state`` / ``from_state`` of an estimator saved as its parameters plus, once fitted,
    what it learned: ``{"class", "version", "params", "fitted", ...}`` with JSON-safe values and
    plain arrays, never pickled (like scikit-learn's ``__getstate__``, the envelope is the base
    class's, the learned part each estimator's).

    A subclass sets ``STATE_VERSIONS`` (the versions ``from_state`` reads; ``to_state`` writes the
    last) and ``_FITTED_ATTRIBUTE`` (a learned attribute, present once fitted), and has
    ``_params()`` (its parameters, JSON-safe), ``_check_params()``, ``_fitted_state()`` (the
    learned part, a dict) and ``_load_fitted(state)`` (its inverse, checking what it reads).
    """

    STATE_VERSIONS: tuple = (1,)
    _FITTED_ATTRIBUTE = ""

    def to_state(self) -> dict:
        """The estimator as a dict of JSON-safe values and plain arrays (see ``_fitted_state``)."""
        fitted = hasattr(self, self._FITTED_ATTRIBUTE)
        state = {"class": type(self).__name__, "version": self.STATE_VERSIONS[-1], "params": self._params(),
                 "fitted": fitted}
        if fitted:
            state.update(self._fitted_state())
        return state

    @classmethod
    def from_state(cls, state: dict) -> Self:
        """Rebuild an estimator saved by :meth:`to_state` (it predicts exactly as before)."""
        check_state(state, cls.__name__, cls.STATE_VERSIONS)
        estimator = cls(**state["params"])
        estimator._check_params()
        if state.get("fitted"):
            estimator._load_fitted(state)
        return estimator


# ----------------------------------------------------------------------------------------
# sorted code tables: the questions a planner wants, one row per int64 code
# ----------------------------------------------------------------------------------------
def find_sorted(sorted_codes: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pos, found): where each of ``codes`` stands (or would be inserted) in ``sorted_codes``,
    and whether it is there."""
    pos = np.searchsorted(sorted_codes, codes)
    if sorted_codes.size == 0:
        return pos, np.zeros(codes.shape, bool)
    found = sorted_codes[np.minimum(pos, sorted_codes.size - 1)] == codes
    return pos, found & (pos < sorted_codes.size)


def lowest_per_code(codes: np.ndarray, priority: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct codes ascending, the lowest priority each was given)."""
    order = np.lexsort((priority, codes))
    codes, priority = codes[order], priority[order]
    first = group_starts(codes)
    return codes[first], priority[first]


class CodeTable:
    """Rows kept sorted by an int64 ``codes`` column, each with a ``priority`` (lower: asked
    sooner) and a ``seq`` number (the order rows were added: older first among equals).

    A subclass names its other columns in ``COLUMNS``, ``{name: (dtype, shape of one row, value
    of a new row)}``, and says what its rows are in ``WHAT`` (for error messages).
    """

    COLUMNS: dict = {}
    WHAT = "code"

    @classmethod
    def _layout(cls) -> dict:
        return {"codes": (np.int64, (), 0), **cls.COLUMNS, "priority": (np.int64, (), 0), "seq": (np.int64, (), 0)}

    def __init__(self) -> None:
        for name, (dtype, shape, _) in self._layout().items():
            setattr(self, name, np.empty((0, *shape), dtype))
        self.next_seq = 0

    def find(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pos, found) of ``codes`` among the rows, as :func:`find_sorted`."""
        return find_sorted(self.codes, codes)

    def insert(self, codes: np.ndarray, priority: ArrayLike = 0) -> None:
        """Add rows for ``codes`` (ascending, none present yet), numbered in that order."""
        if codes.size == 0:
            return
        at = np.searchsorted(self.codes, codes)
        seq = self.next_seq + np.arange(codes.size, dtype=np.int64)
        self.next_seq += int(codes.size)
        given = {"codes": codes, "priority": priority, "seq": seq}
        for name, (_, _, fill) in self._layout().items():
            setattr(self, name, np.insert(getattr(self, name), at, given.get(name, fill), axis=0))

    def rows_of(self, codes: np.ndarray) -> np.ndarray:
        """The rows of ``codes`` (ascending, distinct), adding those not present yet."""
        _, found = self.find(codes)
        self.insert(codes[~found])
        return self.find(codes)[0]

    def drop(self, rows: np.ndarray) -> None:
        if rows.size == 0:
            return
        keep = np.ones(self.codes.size, bool)
        keep[rows] = False
        for name in self._layout():
            setattr(self, name, getattr(self, name)[keep])

    def by_urgency(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` ordered by priority, then age."""
        return rows[np.lexsort((self.seq[rows], self.priority[rows]))]

    def to_state(self, prefix: str, columns: str = "") -> dict:
        """The columns under ``prefix + columns + name``, then ``prefix + "next_seq"``."""
        state = {f"{prefix}{columns}{name}": getattr(self, name).copy() for name in self._layout()}
        state[f"{prefix}next_seq"] = int(self.next_seq)
        return state

    @classmethod
    def from_state(cls, state: dict, prefix: str, columns: str = "") -> Self:
        table = cls()
        for name, (dtype, shape, _) in cls._layout().items():
            setattr(table, name, array_from_state(state[f"{prefix}{columns}{name}"], dtype, shape))
        table.next_seq = int(state[f"{prefix}next_seq"])
        n = table.codes.shape[0] if table.codes.ndim else -1
        if any(getattr(table, name).shape != (n, *shape) for name, (_, shape, _) in cls._layout().items()):
            raise ValueError(f"inconsistent {cls.WHAT} table in state")
        return table


# ----------------------------------------------------------------------------------------
# the forests' JSON documents: trees of nodes with ids local to their tree
# ----------------------------------------------------------------------------------------
NO_NODE = -1


def read_forest_doc(trees: list, n_items: int, status_names: tuple) -> tuple[list, dict]:
    """The nodes of a forest document's ``trees`` in one global numbering: tree t's root is node
    t, the other nodes follow tree by tree in document order.

    Each tree has a ``seed`` (uint64 as a string) and ``nodes``, each node an ``id`` (local, the
    root 0), ``parent`` (local id or None), ``depth``, ``status`` (one of ``status_names``),
    ``children`` (local ids; absent or None where the node is not split) and ``members`` (absent,
    or the items whose node it is). Returns ``(nodes, arrays)``: the ``(global id, node)`` of every
    node, for the caller's own fields, and the ndarrays ``tree_seeds`` (n_trees,), ``node_tree``,
    ``node_parent``, ``node_depth``, ``node_status``, ``node_key`` (recomputed from the seeds, so
    pivots drawn later match the exported forest), ``node_children`` (n_nodes, 2) and
    ``item_node`` (n_trees, n_items).
    """
    m = len(trees)
    total = sum(len(tree["nodes"]) for tree in trees)
    arrays = {
        "tree_seeds": np.zeros(m, np.uint64), "node_tree": np.zeros(total, np.int64),
        "node_parent": np.full(total, NO_NODE, np.int64), "node_depth": np.zeros(total, np.int64),
        "node_status": np.zeros(total, np.int8), "node_children": np.full((total, 2), NO_NODE, np.int64),
        "item_node": np.full((m, n_items), NO_NODE, np.int64),
    }
    nodes = []
    following = m
    for t, tree in enumerate(trees):
        rest = len(tree["nodes"]) - 1
        ids = [t, *range(following, following + rest)]
        following += rest
        arrays["tree_seeds"][t] = np.uint64(int(tree["seed"]))
        for node in tree["nodes"]:
            g = ids[node["id"]]
            nodes.append((g, node))
            arrays["node_tree"][g] = t
            arrays["node_parent"][g] = NO_NODE if node["parent"] is None else ids[node["parent"]]
            arrays["node_depth"][g] = node["depth"]
            arrays["node_status"][g] = status_names.index(node["status"])
            if node.get("children") is not None:
                arrays["node_children"][g] = [ids[c] for c in node["children"]]
            if "members" in node:
                arrays["item_node"][t, node["members"]] = g
    if (arrays["item_node"] == NO_NODE).any():
        raise ValueError("every item must sit in exactly one node per tree")
    arrays["node_key"] = node_keys(arrays["tree_seeds"], arrays["node_depth"], arrays["node_children"])
    return nodes, arrays


def node_keys(tree_seeds: np.ndarray, node_depth: np.ndarray, node_children: np.ndarray) -> np.ndarray:
    """The counter-based key of every node (tree t's root is node t), from its tree's seed and its
    path; ``node_children`` of shape (n_nodes, 2), ``NO_NODE`` where there is no child."""
    keys = np.zeros(node_depth.size, np.uint64)
    keys[: tree_seeds.size] = mix64(tree_seeds)
    for g in np.argsort(node_depth, kind="stable"):
        for side in (0, 1):
            child = node_children[g, side]
            if child != NO_NODE:
                keys[child] = child_keys(keys[g:g + 1], side)[0]
    return keys


# ------------------------------------------------ a facade's attributes read through its parts (``self._s``)
def read_through(path: str, settable: bool = True) -> property:
    """A planner attribute that reads (and, if ``settable``, sets) ``path`` ("part.name") of its parts."""
    *parts, name = path.split(".")
    owner = operator.attrgetter(".".join(["_s", *parts]))

    def get(self: object) -> object:
        return getattr(owner(self), name)

    def put(self: object, value: object) -> None:
        setattr(owner(self), name, value)

    return property(get, put if settable else None, doc=f"``{path}`` of the planner's parts")


def call_through(path: str) -> Callable:
    """A planner method that calls the method ``path`` ("part.method") of its parts."""
    method = operator.attrgetter(f"_s.{path}")

    def call(self: object, *args: object) -> object:
        return method(self)(*args)

    call.__doc__ = f"``{path}`` of the planner's parts"
    return call
