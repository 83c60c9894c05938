"""From a user's model to MetaSchedule tasks and back to something that runs."""

# The four steps of ``tunecache.compile`` that touch the model, in order, one module each:
#
# 1. importing.py  import_model: a PyTorch module (with example inputs), a ``torch.export``
#    ExportedProgram, an ONNX model (ModelProto or path) or a Relax IRModule becomes an
#    ImportedModel (a Relax module plus its weights).
# 2. prepare.py    prepare_for_tuning: weights are bound as constants, and the module is
#    legalized and fused so that every kernel is a TIR PrimFunc, the exact functions
#    MetaSchedule tunes (the pass pipeline is in that module's docstring); model_hash.
# 3. tasks.py      extract_tasks: one TaskInfo per distinct kernel, with its weight (how many
#    times the model calls it) and a WorkloadDesc.
# 4. building.py   build then run: compile the prepared module, applying tuned programs from a
#    MetaSchedule database, and call it with numpy arrays or torch tensors; export_library and
#    load_library (why one prepared module serves both extraction and building is in that
#    module's docstring).
#
# failures.py holds ModelStageError: a failure of any step is a tunecache error naming the stage
# (export, import, prepare, build, run), the operator and source line where known, and what to
# do; fx_rewrites.py gives exported graphs PyTorch semantics TVM's importer lacks.
#
# None of them imports TVM at import time: ``import tunecache`` must not import TVM, so TVM is
# imported inside the functions, through ``tunecache.tvm_layer.load_tvm``.

from tunecache.tvm_layer.frontend.building import (
    build,
    caller,
    degraded_kernels,
    export_library,
    load_library,
    make_vm,
    run,
)
from tunecache.tvm_layer.frontend.failures import ModelStageError, Stage
from tunecache.tvm_layer.frontend.importing import (
    ImportedModel,
    Source,
    TensorSpec,
    import_model,
)
from tunecache.tvm_layer.frontend.prepare import (
    CONV_LAYOUTS,
    FAST_MATH,
    NOTES_ATTR,
    PREPARED_ATTR,
    WEIGHT_PREPACK,
    is_prepared,
    model_hash,
    preparation_notes,
    prepare_for_tuning,
)
from tunecache.tvm_layer.frontend.tasks import TaskInfo, extract_tasks, guess_family

__all__ = [
    "Source",
    "TensorSpec",
    "ImportedModel",
    "TaskInfo",
    "import_model",
    "prepare_for_tuning",
    "preparation_notes",
    "is_prepared",
    "model_hash",
    "extract_tasks",
    "guess_family",
    "build",
    "caller",
    "degraded_kernels",
    "make_vm",
    "run",
    "export_library",
    "load_library",
    "ModelStageError",
    "Stage",
    "PREPARED_ATTR",
    "NOTES_ATTR",
    "CONV_LAYOUTS",
    "FAST_MATH",
    "WEIGHT_PREPACK",
]
