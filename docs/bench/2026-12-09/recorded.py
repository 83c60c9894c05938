"""The calls a compiled zoo model's Relax VM makes, recorded once with their arguments, so that
scripts beside this one can replay the kernels one by one (``pernode.py``, ``vm_overhead.py``)."""
import warnings

import torch

import tunecache
from tunecache import zoo


def recorded_calls(name, store):
    """``(cm, module, inputs, x, calls, vm)``: ``compile(tune="never")`` of zoo model ``name`` on
    ``store``, the PyTorch module, its example inputs, the first as a TVM tensor, every
    ``(function, symbol, args)`` one VM run calls, and that VM (keep it: the VM's builtins among
    the calls need it alive)."""
    import tvm
    from tvm import relax

    warnings.simplefilter("ignore")
    torch.set_num_threads(2)
    zm = zoo.get(name)
    inputs = zm.example_inputs
    cm = tunecache.compile(zm.module, example_inputs=inputs, store=store, tune="never", progress=False,
                           library_cache=False)
    vm = relax.VirtualMachine(cm.executable, tvm.cpu())
    x = tvm.runtime.tensor(inputs[0].numpy())
    calls = []

    def instrument(func, symbol, before, ret, *args):
        if before:
            calls.append((func, symbol, args))
        return 0

    vm.set_instrument(instrument)
    vm["main"](x)
    return cm, zm.module, inputs, x, calls, vm
