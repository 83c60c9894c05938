"""Model specs as the command line and zoo files name them: a zoo name, an ONNX file, a factory."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tunecache.errors import UnsupportedModelError

__all__ = ["load_model_spec"]


def load_model_spec(spec: str) -> tuple[Any, Any, str]:
    """Resolve a CLI model argument to ``(model, example_inputs, name)``.

    ``spec`` is a zoo name (``resnet18``, ``bert_base:seq_len=64``), an ``.onnx`` path, or
    ``path/to/file.py:factory`` where ``factory()`` returns ``(module, example_inputs)``, a
    ``ZooModel``, or any model ``tunecache.compile`` accepts.
    """
    from tunecache import zoo

    if spec.endswith(".onnx"):
        if not Path(spec).is_file():
            raise UnsupportedModelError(f"ONNX file {spec} does not exist")
        return spec, None, Path(spec).stem
    if ".py:" in spec:
        path, factory = spec.rsplit(":", 1)
        if not Path(path).is_file():
            raise UnsupportedModelError(f"Python file {path} does not exist")
        mspec = importlib.util.spec_from_file_location(Path(path).stem, path)
        if mspec is None or mspec.loader is None:
            raise UnsupportedModelError(f"cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(module)
        fn = getattr(module, factory, None)
        if fn is None or not callable(fn):
            raise UnsupportedModelError(f"{path} has no callable {factory!r}")
        got = fn()
        if isinstance(got, zoo.ZooModel):
            return got.module, got.example_inputs, got.name
        if isinstance(got, tuple) and len(got) == 2:
            return got[0], got[1], factory
        return got, None, factory
    name, _, rest = spec.partition(":")
    params: dict[str, Any] = {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        try:
            params[k] = int(v)
        except ValueError:
            try:
                params[k] = float(v)
            except ValueError:
                params[k] = v
    zm = zoo.get(name, **params)
    return zm.module, zm.example_inputs, zm.name
