"""A model that cannot be compiled fails with a tunecache error that names the stage (export,
import, prepare, build, run), the operator and the model's source line where they can be found,
and what to do: never with a raw TVM error.

:func:`stage` wraps one stage of :mod:`tunecache.tvm_layer.frontend`. Only errors raised while TVM
runs (its Python frontends and passes, or its C++ core, and what they call) become
:class:`ModelStageError`; an error raised by tunecache's own code, a bug, propagates unchanged.
The TVM error is always the ``__cause__`` of the tunecache error, so nothing is hidden.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Literal

from tunecache.errors import TunecacheError, UnsupportedModelError

__all__ = ["Stage", "ModelStageError", "stage", "raised_by_tvm", "locate", "source_line"]

Stage = Literal["export", "import", "prepare", "build", "run"]

#: What a user can do when a stage fails (the message ends with it).
WHAT_TO_DO: dict[str, str] = {
    "export": "make the model exportable (see the torch.export docs), or export it to ONNX and compile the "
              ".onnx file",
    "import": "rewrite that part of the model with other operators, or compile it through the other path "
              "(export it to ONNX, or pass the torch module instead of the .onnx file)",
    "prepare": "please report it with the model; compiling it through the other path (ONNX or PyTorch) may "
               "avoid it",
    "build": "please report it with the model; tune='never' builds with TVM's default schedules only, and "
             "compiling it through the other path (ONNX or PyTorch) may avoid it",
    "run": "check the inputs' shapes and values (e.g. token ids within the vocabulary) against the example "
           "inputs it was compiled for",
}

# Python error types TVM raises: its C++ errors arrive as these (InternalError, OpError and
# DiagnosticError are RuntimeErrors), and its Python frontends assert, index and look up.
_TVM_RAISES = (RuntimeError, ValueError, TypeError, KeyError, IndexError, AttributeError, AssertionError,
               MemoryError)


class ModelStageError(UnsupportedModelError):
    """A model failed at one stage of compiling or running it.

    Attributes
    ----------
    stage
        ``"export"``, ``"import"``, ``"prepare"``, ``"build"`` or ``"run"``.
    operator
        The operator being converted or compiled when it failed (``"aten.cat.default"``,
        ``"ONNX Pad"``, a pass or kernel name), when known.
    source
        The model's source line for that operator (``"modeling_gpt2.py:312 in forward: ..."``),
        or the ONNX node's name, when known.
    """

    def __init__(self, message: str, *, stage: Stage, operator: str | None = None,
                 source: str | None = None) -> None:
        super().__init__(message)
        self.stage: Stage = stage
        self.operator = operator
        self.source = source


@functools.lru_cache(maxsize=1)
def _tvm_dirs() -> tuple[str, ...]:
    import importlib.util

    dirs = []
    for pkg in ("tvm", "tvm_ffi"):
        spec = importlib.util.find_spec(pkg)
        if spec is not None and spec.submodule_search_locations:
            dirs += [os.path.realpath(p) + os.sep for p in spec.submodule_search_locations]
    return tuple(dirs)


def _frames(tb: TracebackType | None) -> list[TracebackType]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def raised_by_tvm(err: BaseException) -> bool:
    """Whether ``err`` was raised while TVM was running: a ``tvm.error`` type, or a traceback
    that passes through TVM (a function of the ``tvm`` or ``tvm_ffi`` packages, or a ``.cc``/``.h``
    frame of its C++ core, as TVM's FFI reports them) below the frame that caught it. TVM's
    converters call numpy, onnx and torch, whose errors then count as TVM's; an error raised by
    tunecache's own code, without TVM below it, does not."""
    if type(err).__module__.startswith(("tvm.", "tvm_ffi")):
        return True
    dirs = _tvm_dirs()
    for tb in _frames(err.__traceback__)[1:]:
        path = tb.tb_frame.f_code.co_filename
        if path.endswith((".cc", ".h", ".cpp")) or os.path.realpath(path).startswith(dirs):
            return True
    return False


def source_line(stack_trace: str | None) -> str | None:
    """The model's line in a ``torch.fx`` node's ``stack_trace``: ``"file.py:12 in forward: code"``."""
    if not stack_trace:
        return None
    found = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', stack_trace)
    if not found:
        return None
    path, line, func, code = found[-1]
    return f"{os.path.basename(path)}:{line} in {func}: {code.strip()}"[:200]


def locate(err: BaseException) -> tuple[str | None, str | None]:
    """``(operator, source line)`` of the graph node TVM was converting when it raised ``err``.

    The importers convert one node at a time with the node in a local variable named ``node``
    (a ``torch.fx.Node`` or an ONNX ``NodeProto``); the innermost frame holding one tells which.
    """
    for tb in reversed(_frames(err.__traceback__)):
        node = tb.tb_frame.f_locals.get("node")
        if node is None:
            continue
        if hasattr(node, "target") and hasattr(node, "meta"):  # torch.fx.Node
            meta: dict[str, Any] = node.meta
            return str(node.target), source_line(meta.get("stack_trace"))
        if hasattr(node, "op_type"):  # onnx.NodeProto
            return f"ONNX {node.op_type}", f"ONNX node {node.name!r}" if node.name else None
    return None, None


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else repr(err)}"[:600]


def stage_error(name: Stage, err: BaseException, *, operator: str | None = None, source: str | None = None,
                what: str | None = None) -> ModelStageError:
    """The :class:`ModelStageError` for ``err`` raised by TVM at stage ``name``."""
    import tvm

    if operator is None and source is None:
        operator, source = locate(err)
    where = f" at {operator}" if operator else ""
    line = f" ({source})" if source else ""
    message = (f"{name} failed{where}{line}: TVM {tvm.__version__} raised {_first_line(err)}. "
               f"What to do: {what or WHAT_TO_DO[name]}")
    return ModelStageError(message, stage=name, operator=operator, source=source)


@contextlib.contextmanager
def stage(name: Stage, *, operator: str | None = None, what: str | None = None) -> Iterator[None]:
    """Turn an error TVM raises inside the block into a :class:`ModelStageError` for stage ``name``.

    Parameters
    ----------
    name
        The stage the block is.
    operator
        What the block runs (a pass or kernel name), when the failing graph node cannot be found
        from the traceback.
    what
        What to do, when the stage's usual advice (:data:`WHAT_TO_DO`) does not fit.

    Raises
    ------
    ModelStageError
        For an error raised by TVM in the block, chained to it. tunecache's own errors and
        errors raised outside TVM propagate unchanged.
    """
    try:
        yield
    except TunecacheError:
        raise
    except _TVM_RAISES as err:
        if not raised_by_tvm(err):
            raise
        op, src = locate(err)
        raise stage_error(name, err, operator=op or operator, source=src, what=what) from err
