"""What LLVM made of one scheduled kernel: accumulators kept in registers, or in memory.

A tiled matmul whose sketch has no write cache at the register tile accumulates straight into
its (compacted) intermediate buffer, and relies on LLVM to promote those locations to registers
for the length of the reduction loop. Usually it does. Sometimes it does not: BERT's 64-token FFN
up-projection replayed from its 128-token best with rows ``[1, 4, 1, 16]`` compiled to
``vfmadd213ps (%rax,%r11,4), %zmm1, %zmm0; vmovups %zmm0, (%rax,%r11,4)`` for every FMA (the
accumulator loaded and stored around each one) and ran 5.4 ms, where the same trace with rows
``[2, 2, 1, 16]`` (same register tile, another parallel split) kept its 16 accumulators in
``zmm`` registers and ran 1.35 ms (AMD EPYC Zen 4; docs/NOTES.md, session 28). The TIR of the
two differs only in loop extents; nothing short of compiling tells them apart. A measured
search never keeps such a program (it is measured slow); a zero-trial replay would serve it, so
a replayed matmul is built alone and looked at first (``tunecache.replay.CODE_CHECKED``; BERT's
and ViT's matmuls build alone in 0.05-0.11 s).

The count reads x86 assembly (AT&T syntax, as LLVM prints it): an FMA whose result is stored at
once to the address it read its addend from, either as its memory operand
(``vfmadd213ps (%rax), %zmm1, %zmm0; vmovups %zmm0, (%rax)``) or through the load just before it
(``vmovaps (%rbx), %zmm17; vfmadd231ps %zmm0, %zmm16, %zmm17; vmovaps %zmm17, (%rbx)``). Other
targets are not read (``None``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.target import host_triple

__all__ = ["FmaCount", "accumulators_in_memory", "count_memory_accumulators"]

# Instructions in AT&T syntax: the mnemonic, then operands, the destination last. Directives
# (``.loc``), labels and comments between instructions are skipped.
_INSTRUCTION = re.compile(r"^\s+([a-z][a-z0-9]*)\s*(.*?)\s*(?:#.*)?$")
_MEMORY = r"-?[\w.+-]*\(%\w+(?:,%\w+(?:,\d)?)?\)"
_FMA = re.compile(r"^vf(?:n)?m(?:add|sub)\w*$")
_VMOV = re.compile(r"^vmov(?:u|a)p[sd]$|^vmovs[sd]$")


def _operands(text: str) -> list[str]:
    """Split AT&T operands on the commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


@dataclass(frozen=True)
class FmaCount:
    """The FMA instructions of a kernel's machine code.

    Attributes
    ----------
    fmas
        Every vector or scalar FMA instruction.
    in_memory
        Those whose addend is read from memory and whose result is stored straight back to the
        same address: an accumulator LLVM did not keep in a register.
    """

    fmas: int
    in_memory: int

    @property
    def share(self) -> float:
        """``in_memory`` over ``fmas`` (0 when there are none)."""
        return self.in_memory / self.fmas if self.fmas else 0.0


def count_memory_accumulators(asm: str) -> FmaCount:
    """Count the FMAs in x86 assembly text, and those that read their addend from memory and store
    the result straight back to the same address.

    Parameters
    ----------
    asm
        Assembly in AT&T syntax (``inspect_source("asm")`` of an LLVM module).

    Returns
    -------
    FmaCount
        Both counts.
    """
    insts: list[tuple[str, list[str]]] = []
    for line in asm.splitlines():
        m = _INSTRUCTION.match(line)
        if m is not None and not line.lstrip().startswith("."):
            insts.append((m.group(1), _operands(m.group(2))))
    fmas = in_memory = 0
    for n, (op, args) in enumerate(insts):
        if _FMA.match(op) is None or not args:
            continue
        fmas += 1
        dest = args[-1]
        if n + 1 >= len(insts):
            continue
        nxt_op, nxt = insts[n + 1]
        if _VMOV.match(nxt_op) is None or len(nxt) != 2 or nxt[0] != dest or not re.fullmatch(_MEMORY, nxt[1]):
            continue  # the result is not stored at once
        address = nxt[1]
        loaded = n > 0 and _VMOV.match(insts[n - 1][0]) is not None and insts[n - 1][1] == [address, dest]
        if address in args[:-1] or loaded:  # the stored location was the addend: read, FMA, write
            in_memory += 1
    return FmaCount(fmas, in_memory)


def accumulators_in_memory(mod: Any, target: Any) -> FmaCount | None:
    """Build a scheduled kernel alone and count the FMAs whose accumulator LLVM left in memory
    (:func:`count_memory_accumulators`).

    Parameters
    ----------
    mod
        A scheduled (postprocessed) TIR ``IRModule``.
    target
        A ``tvm.target.Target``.

    Returns
    -------
    FmaCount or None
        The counts; ``None`` where the target is not an x86 CPU (its assembly is not read) or the
        kernel does not build alone.
    """
    tvm = load_tvm()
    if str(target.kind.name) != "llvm":
        return None
    triple = str(target.attrs.get("mtriple", "") or "") or host_triple()
    if not triple.startswith(("x86_64", "i686", "i386")):
        return None
    try:
        asm = tvm.tirx.build(mod, target=target).inspect_source("asm")
    except Exception:  # noqa: BLE001 - a kernel that does not build alone is not judged here
        return None
    return count_memory_accumulators(asm)
