"""A differentiable cost model: a small MLP from sketch features to log time per unit of work.

numpy with hand-written gradients, not PyTorch: PyTorch is an optional extra of tunecache (the
``torch`` frontend), the model is two hidden layers of 32 units, and the search needs the
gradient with respect to the *inputs* (one backward pass per step), which is a few lines here.
XGBoost, MetaSchedule's model, is piecewise constant: no gradient at all.

The target is ``log(latency / work)`` (seconds per multiply-add of the tiled block), so records
of different workloads on the same hardware train one model: Felix pre-trains on ~250k records;
tunecache has the store. The search refines the model online with the task's own measurements.

Weights are kept as JSON (:meth:`CostModel.save`, :meth:`CostModel.load`): lists of floats with
the feature version and the hardware key they were trained for; nothing is pickled.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tunecache.errors import InvalidRecordError
from tunecache.search.gradient.space import FEATURE_VERSION, N_FEATURES

__all__ = ["HIDDEN", "CostModel"]

#: Units of each of the two hidden layers.
HIDDEN = 32
_FORMAT = "tunecache-gradient-model/1"


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class CostModel:
    """An MLP ``features -> log(seconds / work)`` with its input scaling.

    Parameters
    ----------
    seed
        Seeds the initial weights.
    hardware
        The hardware key id the model is trained for (kept in its file).
    """

    def __init__(self, seed: int = 0, hardware: str = "") -> None:
        rng = np.random.default_rng(seed)
        sizes = [N_FEATURES, HIDDEN, HIDDEN, 1]
        self.weights = [rng.normal(0.0, 1.0 / math.sqrt(a), (a, b)) for a, b in zip(sizes, sizes[1:], strict=False)]
        self.biases = [np.zeros(b) for b in sizes[1:]]
        self.mean = np.zeros(N_FEATURES)
        self.scale = np.ones(N_FEATURES)
        self.hardware = hardware
        self.trained_on = 0
        self._adam: list[np.ndarray] | None = None

    # -- forward and backward ----------------------------------------------------------------
    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
        h = (x - self.mean) / self.scale
        acts, pre = [h], []
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=False)):
            a = h @ w + b
            pre.append(a)
            h = a if i == len(self.weights) - 1 else _softplus(a)
            acts.append(h)
        return h[..., 0], acts, pre

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted ``log(seconds / work)`` of feature rows ``x`` (``(n, N_FEATURES)``)."""
        return self._forward(np.atleast_2d(x))[0]

    def input_gradient(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """The prediction at one feature row and its gradient with respect to the row."""
        y, _, pre = self._forward(x[None, :])
        g = np.ones((1, 1))
        for i in range(len(self.weights) - 1, -1, -1):
            if i < len(self.weights) - 1:
                g = g * _sigmoid(pre[i])
            g = g @ self.weights[i].T
        return float(y[0]), g[0] / self.scale

    # -- training ----------------------------------------------------------------------------
    def fit(self, x: np.ndarray, y: np.ndarray, *, weights: np.ndarray | None = None, epochs: int = 300,
            lr: float = 3e-3, rescale: bool = True, seed: int = 0) -> float:
        """Fit ``log(seconds / work)`` targets ``y`` by mini-batch Adam on the squared error.

        Parameters
        ----------
        x, y
            Feature rows and targets.
        weights
            A weight per row (the task's own measurements count more than the store's).
        epochs
            Passes over the rows.
        lr
            Adam's step size.
        rescale
            Recompute the input scaling from ``x`` (a first fit); keep it when refining.
        seed
            Seeds the batch order.

        Returns
        -------
        float
            The final weighted mean squared error.
        """
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        if len(x) == 0:
            return float("nan")
        w = np.ones(len(x)) if weights is None else np.asarray(weights, dtype=float)
        w = w / w.mean()
        if rescale:
            self.mean = x.mean(axis=0)
            self.scale = np.where(x.std(axis=0) > 1e-6, x.std(axis=0), 1.0)
            self._adam = None
        params = self.weights + self.biases
        if self._adam is None:
            self._adam = [np.zeros_like(p) for p in params] + [np.zeros_like(p) for p in params] + [np.zeros(1)]
        m, v, t = self._adam[: len(params)], self._adam[len(params): 2 * len(params)], self._adam[-1]
        rng = np.random.default_rng(seed)
        batch = min(64, len(x))
        loss = float("nan")
        for _ in range(epochs):
            order = rng.permutation(len(x))
            for start in range(0, len(x), batch):
                idx = order[start: start + batch]
                grads, loss = self._batch_grads(x[idx], y[idx], w[idx])
                t += 1
                for i, (p, g) in enumerate(zip(params, grads, strict=False)):
                    m[i] = 0.9 * m[i] + 0.1 * g
                    v[i] = 0.999 * v[i] + 0.001 * g * g
                    mh = m[i] / (1 - 0.9 ** t[0])
                    vh = v[i] / (1 - 0.999 ** t[0])
                    p -= lr * mh / (np.sqrt(vh) + 1e-8)
        pred = self.predict(x)
        self.trained_on = max(self.trained_on, len(x))
        return float(np.mean(w * (pred - y) ** 2)) if loss == loss else loss

    def _batch_grads(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[list[np.ndarray], float]:
        out, acts, pre = self._forward(x)
        err = out - y
        loss = float(np.mean(w * err * err))
        g = (2.0 * w * err / len(x))[:, None]
        gw: list[np.ndarray] = [np.empty(0)] * len(self.weights)
        gb: list[np.ndarray] = [np.empty(0)] * len(self.weights)
        for i in range(len(self.weights) - 1, -1, -1):
            if i < len(self.weights) - 1:
                g = g * _sigmoid(pre[i])
            gw[i] = acts[i].T @ g
            gb[i] = g.sum(axis=0)
            g = g @ self.weights[i].T
        return gw + gb, loss

    # -- files -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The model as a JSON-able dict (format, feature version, hardware, arrays as lists)."""
        return {
            "format": _FORMAT,
            "feature_version": FEATURE_VERSION,
            "hardware": self.hardware,
            "trained_on": self.trained_on,
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "weights": [w.tolist() for w in self.weights],
            "biases": [b.tolist() for b in self.biases],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CostModel:
        """The model of :meth:`to_json`'s dict.

        Raises
        ------
        InvalidRecordError
            If the dict is not such a model, or was made for other features.
        """
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise InvalidRecordError("not a tunecache gradient cost model (format "
                                     f"{doc.get('format') if isinstance(doc, dict) else type(doc).__name__!r})")
        if doc.get("feature_version") != FEATURE_VERSION:
            raise InvalidRecordError(f"the cost model is for feature version {doc.get('feature_version')}, this "
                                     f"tunecache computes version {FEATURE_VERSION}: train it again")
        model = cls(hardware=str(doc.get("hardware", "")))
        try:
            model.mean = np.asarray(doc["mean"], dtype=float)
            model.scale = np.asarray(doc["scale"], dtype=float)
            model.weights = [np.asarray(w, dtype=float) for w in doc["weights"]]
            model.biases = [np.asarray(b, dtype=float) for b in doc["biases"]]
            model.trained_on = int(doc.get("trained_on", 0))
        except (KeyError, TypeError, ValueError) as err:
            raise InvalidRecordError(f"the cost model's arrays are malformed: {err}") from err
        shapes = [w.shape for w in model.weights]
        if (model.mean.shape != (N_FEATURES,) or not shapes or shapes[0][0] != N_FEATURES
                or any(a[1] != b[0] for a, b in zip(shapes, shapes[1:], strict=False))):
            raise InvalidRecordError(f"the cost model's arrays have the wrong shapes ({shapes})")
        return model

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model as JSON (atomically: a temporary file renamed into place)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json()))
        os.replace(tmp, p)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CostModel:
        """Read a model :meth:`save` wrote.

        Raises
        ------
        InvalidRecordError
            If the file is not valid JSON or not such a model.
        """
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise InvalidRecordError(f"cannot read the cost model {path}: {err}") from err
        return cls.from_json(doc)


def targets(latencies: Sequence[float], works: Sequence[float]) -> np.ndarray:
    """``log(seconds / work)`` for latencies and log-work values (:attr:`TiledSpace.work`)."""
    return np.log(np.asarray(latencies, dtype=float)) - np.asarray(works, dtype=float)
