"""A fitted random forest as flat numpy arrays: the controller's fast predict path.

scikit-learn dispatches each of 300 trees through joblib, so a decision cost tens of
milliseconds; :class:`FlatForest` walks all trees and rows together, one level per numpy step.
The result is bit-identical to ``forest.predict(X)`` with ``n_jobs = 1`` (scikit-learn 1.9): X
is cast to float32 and compared as float64, NaN follows ``missing_go_to_left``, and leaf values
are summed in ``estimators_`` order with ``np.add.accumulate`` (``sum`` adds pairwise) after
``+ 0.0`` (a -0.0 leaf becomes +0.0). Only single-output ``RandomForestRegressor`` forests are
supported (:class:`UnsupportedEstimator`); :func:`flat_forest_for` notices a refit."""
from __future__ import annotations

import threading
import weakref

import numpy as np

__all__ = ["FlatForest", "UnsupportedEstimator", "flat_forest_for"]


class UnsupportedEstimator(TypeError):
    """The estimator is not a fitted single-output RandomForestRegressor."""


def _check_supported(forest) -> None:
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.utils.validation import check_is_fitted
    if not isinstance(forest, RandomForestRegressor):
        raise UnsupportedEstimator(
            f"FlatForest supports sklearn.ensemble.RandomForestRegressor only, got "
            f"{type(forest).__module__}.{type(forest).__qualname__}")
    if type(forest).predict is not RandomForestRegressor.predict:
        raise UnsupportedEstimator(
            f"{type(forest).__qualname__} overrides predict; FlatForest would not match it")
    check_is_fitted(forest)  # NotFittedError, sklearn's own message
    if forest.n_outputs_ != 1:
        raise UnsupportedEstimator(
            f"FlatForest supports single-output forests only; this one predicts "
            f"{forest.n_outputs_} outputs")
    if not forest.estimators_:
        raise UnsupportedEstimator("the forest has no trees")


class FlatForest:
    """Predict like a fitted single-output ``RandomForestRegressor``, bit for bit, without
    scikit-learn. Arrays are indexed by a node's flat id ``t * M + i`` (``M``: the largest node
    count); a leaf (and every padding slot) is its own child, so ``predict`` walks every (row,
    tree) pair ``depth`` steps with no mask. Input is checked as sklearn does, bar column names."""

    #: (row, tree) pairs walked at once: bounds the temporaries (rows are independent).
    BLOCK_PAIRS = 1 << 16

    def __init__(self, forest):
        _check_supported(forest)
        trees = [est.tree_ for est in forest.estimators_]
        n_trees = len(trees)
        width = max(int(t.node_count) for t in trees)
        children = np.empty((n_trees, width, 2), dtype=np.intp)
        feature = np.zeros((n_trees, width), dtype=np.intp)
        threshold = np.zeros((n_trees, width), dtype=np.float64)
        missing_left = np.zeros((n_trees, width), dtype=bool)
        value = np.zeros((n_trees, width), dtype=np.float64)
        own = np.arange(n_trees * width, dtype=np.intp).reshape(n_trees, width)
        children[:] = own[:, :, None]  # padding: self-loops
        for t, tree in enumerate(trees):
            n = int(tree.node_count)
            vals = np.asarray(tree.value)
            if vals.shape[1:] != (1, 1):
                raise UnsupportedEstimator(
                    f"tree {t} stores values of shape {vals.shape[1:]}, expected (1, 1)")
            left = np.asarray(tree.children_left, dtype=np.intp)
            right = np.asarray(tree.children_right, dtype=np.intp)
            leaf = left < 0  # sklearn's TREE_LEAF (-1) on both sides
            base = t * width
            children[t, :n, 0] = np.where(leaf, own[t, :n], left + base)
            children[t, :n, 1] = np.where(leaf, own[t, :n], right + base)
            feature[t, :n] = np.where(leaf, 0, tree.feature)
            threshold[t, :n] = np.where(leaf, 0.0, tree.threshold)
            missing_left[t, :n] = np.asarray(tree.missing_go_to_left, dtype=bool)
            value[t, :n] = vals[:, 0, 0]
        self.n_trees = n_trees
        self.width = width
        self.children = children
        self.feature = feature
        self.threshold = threshold
        self.missing_left = missing_left
        self.value = value
        self.roots = own[:, 0].copy()
        self.depth = max(int(t.max_depth) for t in trees)
        self.n_features_in_ = int(forest.n_features_in_)
        # sklearn lets NaN through exactly when its trees support missing values
        tags = forest.estimators_[0].__sklearn_tags__()
        self.allow_nan = bool(tags.input_tags.allow_nan)
        # flat views for the walk
        self._kids = children.reshape(-1)
        self._feature = feature.reshape(-1)
        self._threshold = threshold.reshape(-1)
        self._missing_left = missing_left.reshape(-1)
        self._value = value.reshape(-1)

    def _validate(self, X) -> np.ndarray:
        """X as sklearn's predict sees it: a 2-D float32 array, checked the same way."""
        from scipy.sparse import issparse
        if issparse(X):
            raise TypeError("FlatForest.predict takes a dense array; sparse input is not "
                            "supported")
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2:
            raise ValueError(f"expected a 2-D array (rows x {self.n_features_in_} features), "
                             f"got {X.ndim}-D")
        if X.shape[0] == 0:
            raise ValueError("found an array with 0 rows; at least 1 is required")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but the forest was fitted with "
                             f"{self.n_features_in_}")
        finite = np.isfinite(X)
        if not finite.all():
            if np.isinf(X).any():
                raise ValueError("X contains infinity or a value too large for float32")
            if not self.allow_nan:
                raise ValueError("X contains NaN")
        return X

    def apply(self, X) -> np.ndarray:
        """The leaf each row reaches in each tree: shape (n_rows, n_trees), node ids within
        the tree (as ``forest.apply``)."""
        return self._leaves(self._validate(X)) - self.roots[None, :]

    def _leaves(self, X32: np.ndarray) -> np.ndarray:
        """Flat ids (n_rows, n_trees) of the leaves reached by the rows of float32 ``X32``."""
        X = X32.astype(np.float64)  # exact: what the Cython comparison promotes to
        n_rows, n_features = X.shape
        flat_x = X.reshape(-1)
        row_start = (np.arange(n_rows, dtype=np.intp) * n_features)[:, None]
        node = np.repeat(self.roots[None, :], n_rows, axis=0)
        has_nan = bool(np.isnan(flat_x).any())
        for _ in range(self.depth):  # np.take: the fastest gather for these small arrays
            x = flat_x.take(row_start + self._feature.take(node))
            go_right = ~(x <= self._threshold.take(node))  # NaN compares False: right, for now
            if has_nan:
                nan = np.isnan(x)
                go_right[nan] = ~self._missing_left[node[nan]]
            node = self._kids.take(2 * node + go_right)
        return node

    def predict(self, X) -> np.ndarray:
        """The forest's prediction for the rows of ``X``: shape (n_rows,), float64,
        bit-identical to ``forest.predict(X)`` with ``n_jobs=1``."""
        X32 = self._validate(X)
        out = np.empty(len(X32), dtype=np.float64)
        step = max(1, self.BLOCK_PAIRS // self.n_trees)  # rows per block: bounded memory
        for start in range(0, len(X32), step):
            leaves = self._leaves(X32[start:start + step])
            per_tree = self._value.take(leaves)  # (rows, n_trees); a fresh array
            per_tree[:, 0] += 0.0  # sklearn adds the first tree to a zero vector
            # sequential additions in tree order (np.sum would add pairwise)
            out[start:start + step] = np.add.accumulate(per_tree, axis=1)[:, -1]
        return out / self.n_trees


# -- a cache keyed by the fitted forest --------------------------------------------------
# Outside the estimator, so pickling is unchanged. Entry: (estimators_ when built, FlatForest
# or None): a refit replaces estimators_ and is noticed. Locked: worker threads share a policy.
_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def flat_forest_for(model) -> FlatForest | None:
    """The cached :class:`FlatForest` of a fitted ``RandomForestRegressor`` (built on first
    use), or None when ``model`` is something FlatForest does not support (the caller then uses
    ``model.predict``). The cache holds the forest weakly and adds nothing to it."""
    trees = getattr(model, "estimators_", None)
    with _CACHE_LOCK:
        try:
            entry = _CACHE.get(model)
        except TypeError:  # not weak-referenceable: never a sklearn forest
            return None
        if entry is not None and entry[0] is trees:
            return entry[1]
        try:
            flat = FlatForest(model)
        except UnsupportedEstimator:
            flat = None
        _CACHE[model] = (trees, flat)
        return flat
