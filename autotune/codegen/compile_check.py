"""Compiling a generated package's kernels for a CUDA target, with no GPU: proof that every
kernel is valid Triton, and what the compiler says about it (PTX size, shared memory and
registers).

The package's ``kernels.py`` is imported as a fresh module under a unique name with
``TRITON_INTERPRET`` off, so the ``@triton.jit`` functions are real JIT functions even in a
process whose runner already turned the interpreter on; the environment is restored after.
When ``TRITON_CACHE_DIR`` is unset the compiler writes to a private temporary folder, not to
``~/.triton``. Kernels with very large blocks take minutes and many GB in ptxas (a 128 x 256
two-accumulator float32 matmul was killed at 23 GB); such a failure is a result like any other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import json
import logging
import os
import re
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from autotune.codegen.errors import CodegenError
from autotune.codegen.execute import import_path
from autotune.codegen.program import Program
from autotune.codegen.templates.common import KernelSource
from search_space.ir import Graph

__all__ = ["TRITON_TYPES", "CompileResult", "code_shape", "compile_package"]

TRITON_TYPES = {
    "float32": "*fp32",
    "float16": "*fp16",
    "bfloat16": "*bf16",
    "float64": "*fp64",
    "int64": "*i64",
    "int32": "*i32",
    "int16": "*i16",
    "int8": "*i8",
    "uint8": "*u8",
    "bool": "*i1",
}
NUM_WARPS = 4
_SERIAL = itertools.count()
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompileResult:
    """One kernel through the compiler: ``ok``, or the first line of its error; and what the
    compiled kernel reports (registers come from the cubin, as no GPU loads it)."""

    kernel: str
    ok: bool
    error: str = ""
    ptx_lines: int = 0
    shared_bytes: int = 0
    registers: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compile_package(
    folder: str | Path, graph: Graph, program: Program, *, arch: int = 80
) -> list[CompileResult]:
    """Compile every kernel of ``program`` from the package in ``folder`` for
    ``GPUTarget("cuda", arch, 32)`` (``num_stages`` from its launch, 4 warps).

    A kernel that does not compile is a result with ``ok=False``, never an exception; so is
    every kernel when ``kernels.py`` does not import.

    Raises:
        CodegenError: ``folder`` has no ``kernels.py``.
    """
    path = Path(folder) / "kernels.py"
    if not path.is_file():
        raise CodegenError(f"'{folder}' has no kernels.py; write the package first")
    jobs = []
    for k in program.kernels:
        try:
            sig: dict[str, str] | str = signature(k, graph)
        except KeyError as err:
            sig = f"no Triton pointer type for {err}"
        jobs.append(
            {
                "name": k.name,
                "signature": sig,
                "constexprs": dict(k.launch.constexprs),
                "num_stages": k.launch.num_stages,
            }
        )
    return _in_subprocess(path, jobs, arch)


def _in_subprocess(path: Path, jobs: list[dict[str, Any]], arch: int) -> list[CompileResult]:
    """Compile in a fresh interpreter: Triton fixes a process's mode (compiled or the CPU
    interpreter) when it first decorates a kernel, so a process that ran kernels under the
    interpreter cannot also compile them, nor the reverse."""
    request = json.dumps({"path": str(path), "jobs": jobs, "arch": arch})
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-m", "autotune.codegen.compile_check"],
        input=request,
        text=True,
        capture_output=True,
        env=env,
        check=False,
    )
    try:
        rows = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        why = f"the compiler process failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
        return [CompileResult(j["name"], False, why) for j in jobs]
    return [CompileResult(**row) for row in rows]


def _serve() -> None:
    """The compiler process: a request on stdin, one JSON line of results on stdout."""
    request = json.loads(sys.stdin.read())
    path, arch = Path(request["path"]), int(request["arch"])
    with _compiler_env():
        try:
            module = _import_fresh(path)
        except Exception as err:  # a broken kernels.py fails every kernel, as data
            why = f"kernels.py does not import: {_first_line(err)}"
            rows = [CompileResult(j["name"], False, why) for j in request["jobs"]]
        else:
            rows = [_compile(module, j, arch) for j in request["jobs"]]
    print(json.dumps([dataclasses.asdict(r) for r in rows]))


@contextlib.contextmanager
def _compiler_env() -> Iterator[None]:
    """``TRITON_INTERPRET=0`` and, when none is set, a private cache folder; both restored."""
    saved = {key: os.environ.get(key) for key in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    with tempfile.TemporaryDirectory(prefix="autotune-triton-cache-") as cache:
        os.environ["TRITON_INTERPRET"] = "0"
        if not saved["TRITON_CACHE_DIR"]:
            os.environ["TRITON_CACHE_DIR"] = cache
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _import_fresh(path: Path) -> ModuleType:
    """``path`` as a new module (a name no earlier import used), decorated as it is now."""
    return import_path(f"autotune_compile_check_{os.getpid()}_{next(_SERIAL)}", path)


def signature(kernel: KernelSource, graph: Graph) -> dict[str, str]:
    """The kernel's parameters in order: ``in*`` and ``out*`` pointers typed from the graph
    (or the kernel's scratch buffers), then its constexprs.

    Raises:
        KeyError: a tensor of a type with no Triton pointer type (the dtype).
    """

    def ptr(tensor: str) -> str:
        return TRITON_TYPES[kernel.tensor_type(graph, tensor)[1]]

    sig = {f"in{i}": ptr(t) for i, t in enumerate(kernel.inputs)}
    sig |= {f"out{i}": ptr(t) for i, t in enumerate(kernel.outputs)}
    sig |= {name: "constexpr" for name, _ in kernel.launch.constexprs}
    return sig


def code_shape(kernel: KernelSource, graph: Graph) -> tuple[object, ...]:
    """What decides how a kernel compiles: its body with every number elided (shapes and
    strides), its compile-time parameters and its pointer types. Kernels of one code shape
    compile alike, so a check compiles one of each."""
    body = kernel.text.split('"""')[-1]  # after the docstring, which names the group and tensors
    numbers = re.sub(r"\b\d+\b", "#", body)
    return (numbers, kernel.launch.constexprs, *signature(kernel, graph).values())


def _compile(module: ModuleType, job: dict[str, Any], arch: int) -> CompileResult:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name, sig = job["name"], job["signature"]
    fn = getattr(module, name, None)
    if fn is None or not hasattr(fn, "arg_names"):
        return CompileResult(name, False, "no @triton.jit function of that name")
    if isinstance(sig, str):
        return CompileResult(name, False, sig)
    if list(fn.arg_names) != list(sig):
        return CompileResult(
            name, False, f"parameters {list(fn.arg_names)} but the launch passes {list(sig)}"
        )
    source = ASTSource(fn=fn, signature=sig, constexprs=job["constexprs"])
    options = {
        "num_warps": NUM_WARPS,
        "num_stages": job["num_stages"],
        "enable_fp_fusion": True,
    }  # today's default, named so it stays (Triton 3.10)
    printed = io.StringIO()  # ptxas failures print the whole PTX; keep it for the log only
    try:
        with contextlib.redirect_stdout(printed):
            compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as err:  # every compiler failure is a result, not a crash
        log.debug("%s does not compile: %s\n%s", name, err, printed.getvalue())
        return CompileResult(name, False, _first_line(err))
    asm = compiled.asm
    return CompileResult(
        name,
        True,
        ptx_lines=len(asm.get("ptx", "").splitlines()),
        shared_bytes=int(getattr(compiled.metadata, "shared", 0) or 0),
        registers=_registers(compiled, asm.get("cubin", b"")),
    )


def _first_line(err: BaseException) -> str:
    """The error's message in one line: a Triton front-end error as ``line N: message``."""
    message = getattr(err, "error_message", None)
    node = getattr(err, "node", None)
    if message is None and err.__cause__ is not None and node is not None:
        message = str(err.__cause__)
    if message is not None and node is not None and hasattr(node, "lineno"):
        text = next((s for s in str(message).splitlines() if s.strip()), "")
        return f"{type(err).__name__} at line {node.lineno}: {text.strip()}"
    text = next((s for s in str(err).splitlines() if s.strip()), "")
    return f"{type(err).__name__}: {text.strip()}" if text else type(err).__name__


def _registers(compiled: Any, cubin: bytes) -> int:
    """Registers per thread: the loaded kernel's ``n_regs`` when a GPU loaded it, else the
    count ptxas wrote in the top byte of ``sh_info`` of the cubin's ``.text.<kernel>``."""
    n_regs = getattr(compiled, "n_regs", None)
    if isinstance(n_regs, int):
        return n_regs
    try:
        return _cubin_registers(cubin, compiled.metadata.name)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return 0


def _cubin_registers(cubin: bytes, name: str) -> int:
    if not isinstance(cubin, bytes) or cubin[:4] != b"\x7fELF":
        return 0
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    entsize, count, names_at = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i: int) -> tuple[int, ...]:
        return struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize)

    strings = header(names_at)[4]
    wanted = f".text.{name}".encode()
    for i in range(count):
        h = header(i)
        start = strings + h[0]
        if cubin[start : cubin.index(b"\0", start)] == wanted:
            return h[7] >> 24
    return 0


if __name__ == "__main__":
    _serve()
