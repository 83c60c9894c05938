"""``torch.compile(model, backend="tunecache")``: every graph dynamo hands over compiled through the store.

Registered through the ``torch_dynamo_backends`` entry point, so no ``import tunecache`` is
needed. Each graph becomes a :class:`~tunecache.dynamic.DynamicModel` over its inputs' shapes:
the first call with a shape compiles a variant with :func:`tunecache.compile` (hits, replays,
fallbacks; misses tuned or queued as the tuning mode says), later calls run it. A graph dynamo
made shape-polymorphic (after it saw a second shape) reaches the same path: its size arguments
are part of the key, so each concrete shape gets its own static variant, as ``dynamic=True``
does.

What dynamo passes:

- the model's parameters and buffers are graph inputs (dynamo inlines ``nn.Module`` calls); they
  are bound into each variant as weights, as :func:`tunecache.compile` of the module would, so
  both paths share the store's programs. A weight changed in place or replaced since (its
  version counter or identity differs) makes the graph compile again;
- ``options=`` of ``torch.compile`` arrives as the ``options`` keyword (``mode=`` as ``mode``,
  which is ignored): the store, tuning mode, target and budget, defaulting to tunecache's
  configuration (``TUNECACHE_DB``, ``TUNECACHE_TUNE``).

A backend must not break the model: a graph tunecache cannot compile (an operator TVM cannot
import, a store that cannot be opened), one that needs autograd (tunecache compiles inference
only) or one with tensors on another device runs eagerly, with a warning saying why.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunecache import config
from tunecache.dynamic import DEFAULT_MAX_VARIANTS, DynamicModel
from tunecache.errors import ConfigError, TargetError, TunecacheError

if TYPE_CHECKING:
    import torch

    from tunecache.api import CompiledModel

__all__ = ["BackendOptions", "CompiledGraph", "backend"]

log = logging.getLogger("tunecache")

#: What ``options=`` may set, each a keyword argument of :func:`tunecache.compile` (``name``: the
#: graph's name in the tuning queue) or of :class:`~tunecache.dynamic.DynamicModel`.
OPTION_NAMES = ("store", "overlay", "target", "tune", "trials_per_task", "time_budget_s", "library_cache",
                "name", "max_variants")


@dataclass(frozen=True)
class BackendOptions:
    """The settings of one ``torch.compile(..., backend="tunecache")``.

    Attributes
    ----------
    store
        Store URL or path; ``None``: ``TUNECACHE_DB`` or the default SQLite file.
    overlay
        A local store in front of ``store`` (see :func:`tunecache.compile`).
    target
        Compilation target; ``None``: this host's CPU. Only CPU targets run here.
    tune
        ``"background"`` (default, ``TUNECACHE_TUNE``), ``"never"``, ``"auto"`` or ``"always"``.
    trials_per_task, time_budget_s, library_cache, name
        As :func:`tunecache.compile`'s (``name``: the model in the tuning queue; default
        ``"torch.compile frame N"``).
    max_variants
        Shapes kept compiled for one graph.
    """

    store: Any = None
    overlay: Any = None
    target: Any = None
    tune: str = "background"
    trials_per_task: int = config.DEFAULT_TRIALS_PER_TASK
    time_budget_s: float | None = None
    library_cache: Any = None
    name: str | None = None
    max_variants: int = DEFAULT_MAX_VARIANTS

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> BackendOptions:
        """Read ``torch.compile``'s ``options=`` dict; unset values come from :mod:`tunecache.config`.

        Raises
        ------
        ConfigError
            If a key is unknown (naming the known ones) or the tuning mode or a budget is invalid.
        """
        opts = dict(options or {})
        unknown = sorted(set(opts) - set(OPTION_NAMES))
        if unknown:
            raise ConfigError(f"torch.compile(backend='tunecache') options {', '.join(map(repr, unknown))} are "
                              f"unknown; known: {', '.join(OPTION_NAMES)}")
        tune = opts.get("tune") or config.default_tune_mode()
        if tune not in config.TUNE_MODES:
            raise ConfigError(f"options['tune']={tune!r} is not one of {', '.join(config.TUNE_MODES)}")
        opts["tune"] = tune
        if opts.get("store") is None:
            opts["store"] = config.default_store_url()
        config.check_trials("options['trials_per_task']", opts.get("trials_per_task", config.DEFAULT_TRIALS_PER_TASK))
        config.check_seconds("options['time_budget_s']", opts.get("time_budget_s"))
        return cls(**opts)


def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], *,
            options: Mapping[str, Any] | None = None, mode: str | None = None) -> Callable[..., Any]:
    """The ``torch.compile`` backend: compile ``gm`` through the store, per input shape.

    Parameters
    ----------
    gm
        The graph dynamo captured. It returns a tuple of tensors.
    example_inputs
        Its inputs: tensors (the model's inputs, parameters and buffers), and ``SymInt`` sizes
        when dynamo made the graph shape-polymorphic.
    options
        ``torch.compile(..., options={...})``: keys of :data:`OPTION_NAMES`, e.g.
        ``{"store": "sqlite:///tc.db", "tune": "never"}``.
    mode
        ``torch.compile``'s ``mode``; ignored (the tuning mode is ``options["tune"]``).

    Returns
    -------
    callable
        A :class:`CompiledGraph`, or ``gm.forward`` when the graph runs eagerly (nothing to
        compile, or tunecache cannot run it: a warning says why).

    Raises
    ------
    ConfigError
        If ``options`` are invalid.

    Examples
    --------
    >>> fast = torch.compile(model, backend="tunecache", options={"tune": "never"})  # doctest: +SKIP
    >>> with torch.no_grad():                                                       # doctest: +SKIP
    ...     y = fast(x)
    """
    opts = BackendOptions.from_options(options)
    if mode not in (None, "default"):
        log.debug("tunecache backend: torch.compile mode=%r ignored; set options={'tune': ...}", mode)
    plan = GraphPlan.of(gm, example_inputs)
    if plan.eager_reason is not None:
        if plan.warn:
            warnings.warn(f"tunecache: {plan.eager_reason}; this graph runs eagerly", stacklevel=2)
        else:
            log.debug("tunecache backend: %s; the graph runs eagerly", plan.eager_reason)
        return gm.forward
    return CompiledGraph(gm, plan, opts)


# ---------------------------------------------------------------------------------------------
# What the graph takes and returns
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphPlan:
    """Which of a dynamo graph's inputs are weights, tensors and sizes, and how its outputs nest.

    Attributes
    ----------
    weights
        Positions of parameters and buffers (bound into each variant).
    tensors
        Positions of the model's tensor inputs (the compiled variant's inputs).
    scalars
        Positions of Python numbers (``SymInt`` sizes in a shape-polymorphic graph): part of the key.
    out_spec
        The pytree spec of the graph's output (a tuple of tensors, usually).
    eager_reason
        Why the graph runs eagerly instead, or ``None``.
    warn
        Whether that reason deserves a warning (a graph with nothing to compile does not).
    """

    weights: tuple[int, ...] = ()
    tensors: tuple[int, ...] = ()
    scalars: tuple[int, ...] = ()
    out_spec: Any = None
    eager_reason: str | None = None
    warn: bool = True

    @classmethod
    def of(cls, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> GraphPlan:
        """Classify ``gm``'s inputs and outputs; say why it must run eagerly, if it must."""
        import torch
        from torch.utils._pytree import tree_flatten

        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if not any(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes):
            return cls(eager_reason="the graph computes nothing", warn=False)
        if len(placeholders) != len(example_inputs):
            return cls(eager_reason=f"the graph has {len(placeholders)} inputs but dynamo gave "
                                    f"{len(example_inputs)} examples")
        weights: list[int] = []
        tensors: list[int] = []
        scalars: list[int] = []
        for i, (node, x) in enumerate(zip(placeholders, example_inputs, strict=True)):
            if isinstance(x, torch.Tensor):
                if x.device.type != "cpu":
                    return cls(eager_reason=f"input {node.name} is on {x.device}; tunecache's torch.compile "
                                            "backend runs on the CPU")
                static = node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")
                (weights if static is not None or isinstance(x, torch.nn.Parameter) else tensors).append(i)
            elif isinstance(x, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
                scalars.append(i)
            else:
                return cls(eager_reason=f"input {node.name} is a {type(x).__name__}, not a tensor or a number")
        if not tensors:
            return cls(eager_reason="the graph has no tensor inputs", warn=False)
        if torch.is_grad_enabled() and any(example_inputs[i].requires_grad for i in weights + tensors):
            return cls(eager_reason="the graph needs autograd (grad mode is on and an input or weight requires "
                                    "grad) and tunecache compiles inference only; call the model under "
                                    "torch.no_grad() or torch.inference_mode() to run it compiled")
        leaves, spec = tree_flatten(gm.graph.output_node().args[0])
        for leaf in leaves:
            if isinstance(leaf, torch.fx.Node) and "example_value" not in leaf.meta:
                continue  # not traced by dynamo (e.g. symbolic_trace): its export says if it is no tensor
            value = leaf.meta["example_value"] if isinstance(leaf, torch.fx.Node) else leaf
            if not isinstance(value, torch.Tensor):
                return cls(eager_reason=f"an output of the graph is a {type(value).__name__}, not a tensor")
        return cls(tuple(weights), tuple(tensors), tuple(scalars), spec)


def _bound_module(gm: torch.fx.GraphModule, plan: GraphPlan, args: tuple[Any, ...]) -> torch.nn.Module:
    """The ``torch.nn.Module`` one variant exports: ``gm`` taking only the model's tensor inputs,
    its weights bound as buffers and its sizes as constants, returning its outputs flat."""
    import torch
    from torch.utils._pytree import tree_flatten

    class BoundGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gm = gm
            self.template = [None if i in plan.weights or i in plan.tensors else a for i, a in enumerate(args)]
            for j, i in enumerate(plan.weights):
                self.register_buffer(f"w{j}", args[i].detach())

        def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            full = list(self.template)
            for j, i in enumerate(plan.weights):
                full[i] = getattr(self, f"w{j}")
            for i, t in zip(plan.tensors, tensors, strict=True):
                full[i] = t
            return tuple(tree_flatten(self.gm(*full))[0])

    return BoundGraph().eval()


class _GraphVariant:
    """One compiled shape of a graph: picks the tensor inputs, nests the outputs as ``gm`` does."""

    def __init__(self, compiled: CompiledModel, plan: GraphPlan) -> None:
        self.compiled = compiled
        self.report = compiled.report
        self._plan = plan

    def __call__(self, *args: Any) -> Any:
        from torch.utils._pytree import tree_unflatten

        out = self.compiled(*[args[i] for i in self._plan.tensors])
        leaves = list(out) if isinstance(out, tuple) else [out]
        return tree_unflatten(leaves, self._plan.out_spec)

    def refresh(self) -> _GraphVariant:
        new = self.compiled.refresh()
        return self if new is self.compiled else _GraphVariant(new, self._plan)


class CompiledGraph:
    """What :func:`backend` returns for a graph it compiles: dynamo calls it with the graph's inputs.

    Attributes
    ----------
    dynamic
        The graph's :class:`~tunecache.dynamic.DynamicModel` (one compiled variant per shape).
    eager_reason
        Why the graph now runs eagerly (a compile failed), or ``None``.
    """

    def __init__(self, gm: torch.fx.GraphModule, plan: GraphPlan, options: BackendOptions) -> None:
        self._gm = gm
        self._plan = plan
        self._options = options
        self.eager_reason: str | None = None
        self.dynamic = DynamicModel(gm, self._compile_variant, options.max_variants, key=self._key)
        self._weights: list[tuple[Any, int]] = []  # (tensor, version) of the weights the variants bound

    def __call__(self, *args: Any) -> Any:
        if self.eager_reason is not None:
            return self._gm(*args)
        self._check_weights(args)
        try:
            return self.dynamic(*args)
        except (ConfigError, TargetError):
            raise  # the user's settings are wrong: say so
        except TunecacheError as err:  # cannot import or build it, or the store failed: run the graph as it is
            self.eager_reason = f"{type(err).__name__}: {err}"
            warnings.warn(f"tunecache could not compile a torch.compile graph, which runs eagerly from now on: "
                          f"{self.eager_reason}", stacklevel=2)
            return self._gm(*args)

    def _key(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        key: list[Any] = []
        for i in self._plan.tensors:
            key.append((tuple(args[i].shape), str(args[i].dtype)))
        for i in self._plan.scalars:
            key.append((type(args[i]).__name__, args[i]))
        return tuple(key)

    def _check_weights(self, args: tuple[Any, ...]) -> None:
        """Forget the variants when a weight they bound was changed in place or replaced."""
        if not self._weights:
            return
        for (bound, version), i in zip(self._weights, self._plan.weights, strict=True):
            if args[i] is not bound or _version(args[i]) != version:
                log.info("tunecache: a weight of a torch.compile graph changed since it was compiled; "
                         "compiling it again")
                self.dynamic.clear()
                self._weights = []
                return

    def _compile_variant(self, args: tuple[Any, ...]) -> _GraphVariant:
        import tunecache.api

        o = self._options
        module = _bound_module(self._gm, self._plan, args)
        frame = str(self._gm.meta.get("dynamo_compile_id", "")).strip("[]").split("/")[0]  # "0/1": frame 0, 2nd compile
        name = o.name if o.name is not None else f"torch.compile frame {frame}"
        compiled = tunecache.api.compile(
            module, o.target, example_inputs=tuple(args[i] for i in self._plan.tensors), store=o.store,
            overlay=o.overlay, tune=o.tune, trials_per_task=o.trials_per_task, time_budget_s=o.time_budget_s,
            progress=False, library_cache=o.library_cache, name=name)
        self._weights = [(args[i], _version(args[i])) for i in self._plan.weights]
        log.info("tunecache: compiled a torch.compile graph for %s: %s", self._key(args), compiled.report.summary())
        return _GraphVariant(compiled, self._plan)

    def __repr__(self) -> str:
        state = f"eager ({self.eager_reason})" if self.eager_reason else repr(self.dynamic)
        return f"<tunecache CompiledGraph {state}>"


def _version(t: torch.Tensor) -> int:
    """``t``'s version counter (bumped by every in-place change); -1 for an inference tensor, which has none."""
    try:
        return int(t._version)
    except RuntimeError:  # "Inference tensors do not track version counter"
        return -1
