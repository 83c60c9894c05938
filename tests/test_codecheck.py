"""Accumulators in memory, read from a kernel's machine code (tunecache.tvm_layer.codecheck)."""

from __future__ import annotations

import platform
from typing import Any

import pytest
from _models import te_matmul

from tunecache.tvm_layer.codecheck import FmaCount, count_memory_accumulators

X86 = platform.machine().lower() in ("x86_64", "amd64")

# The two forms LLVM prints when it did not keep an accumulator in a register (session 28's
# 64-token FFN; a reduction loop outside a tile too large for the register file), with the
# debug-line directives it puts between instructions.
IN_MEMORY = """
\tvbroadcastss\t(%rdx,%rcx,4), %zmm1
\tvfmadd213ps\t(%rax,%r11,4), %zmm1, %zmm0
\tvmovups\t%zmm0, (%rax,%r11,4)
\t.loc\t1 17 21
\tvmovaps\t-1984(%rbx,%rax), %zmm17
\t.loc\t1 17 21
\tvfmadd231ps\t%zmm0, %zmm16, %zmm17
\tvmovaps\t%zmm17, -1984(%rbx,%rax)
"""
# Accumulators in registers (a broadcast operand read from memory), and an epilogue's FMA whose
# result goes to another buffer than the one it read.
IN_REGISTERS = """
.LBB0_3:
\tvfmadd231ps\t(%r11,%rcx){1to16}, %zmm16, %zmm15
\tvfmadd231ps\t%zmm2, %zmm4, %zmm13
\tvmovups\t(%rsi), %zmm3
\tvfmadd213ps\t(%rdi), %zmm1, %zmm3
\tvmovups\t%zmm3, (%r8)
"""


def test_both_forms_of_an_accumulator_in_memory_are_counted() -> None:
    assert count_memory_accumulators(IN_MEMORY) == FmaCount(fmas=2, in_memory=2)
    assert count_memory_accumulators(IN_REGISTERS) == FmaCount(fmas=3, in_memory=0)
    both = count_memory_accumulators(IN_MEMORY + IN_REGISTERS)
    assert both == FmaCount(fmas=5, in_memory=2) and both.share == pytest.approx(0.4)
    assert count_memory_accumulators("").share == 0.0


@pytest.mark.tvm
@pytest.mark.skipif(not X86, reason="the count reads x86 assembly")
def test_a_reduction_outside_a_large_tile_accumulates_in_memory(tvm: Any, target: Any) -> None:
    """Real builds: a 64 x 256 accumulator updated once per reduction step cannot live in
    registers; the predicted program of a small matmul keeps its register tile in registers."""
    from tvm.script import tirx as T

    from tunecache.replay import MEMORY_ACCUMULATORS
    from tunecache.search.predict import predict_program
    from tunecache.tvm_layer.codecheck import accumulators_in_memory

    @T.prim_func
    def outside(a: T.Buffer((64, 256), "float32"), b: T.Buffer((256, 256), "float32"),
                c: T.Buffer((64, 256), "float32")) -> None:
        T.func_attr({"tirx.noalias": True})
        for i, j in T.grid(64, 256):
            c[i, j] = T.float32(0)
        for k in range(256):
            for i in range(64):
                for j0 in range(16):
                    for j1 in T.vectorized(16):
                        c[i, j0 * 16 + j1] = c[i, j0 * 16 + j1] + a[i, k] * b[k, j0 * 16 + j1]

    bad = accumulators_in_memory(tvm.IRModule({"main": outside}), target)
    assert bad is not None and bad.fmas > 0 and bad.share >= 0.9, bad
    got = predict_program(te_matmul(tvm, 64, 128, 64), target)
    assert not isinstance(got, str), got
    good = accumulators_in_memory(got.sch.mod, target)
    # None on Zen 4 (AVX-512); on other vector widths a spill may show, never what a replay refuses.
    assert good is not None and good.fmas > 0 and good.share < MEMORY_ACCUMULATORS, good


def test_a_target_whose_assembly_is_not_read_is_not_judged(tvm: Any) -> None:
    from tunecache.tvm_layer.codecheck import accumulators_in_memory

    arm = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    assert accumulators_in_memory(tvm.IRModule({}), arm) is None
