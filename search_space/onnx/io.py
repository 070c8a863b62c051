"""Reading ONNX models and checking the structural rules the rest of the tool relies on.

Everything here validates at the boundary: a problem with the user's file becomes one
:class:`ModelLoadError` / :class:`GraphError` line that names it and says how to fix it.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import networkx as nx
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from search_space.atomic import atomic_write_bytes, output_path, write_error
from search_space.exceptions import DynamicShapeError, GraphError, ModelLoadError, check
from search_space.onnx.dims import example_dim

__all__ = [
    "MIN_OPSET",
    "ModelSource",
    "declared_dims",
    "default_opset",
    "node_names",
    "parse_input_shapes",
    "read_model",
    "read_model_with_data",
    "save_model",
    "static_input_dims",
    "topological_order",
]

MIN_OPSET = 9
ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto


def read_model(source: ModelSource) -> tuple[onnx.ModelProto, Path | None]:
    """Read a model from a path, serialized bytes or a ModelProto, without its large weights.

    External data files are checked to exist; their contents are left on disk (only the small
    tensors the loader folds are read, with :func:`load_tensor_data`).

    Returns:
        The model and the folder its external data is relative to (None for bytes/protos).

    Raises:
        ModelLoadError: missing file, unreadable or truncated file, missing external data.
    """
    if isinstance(source, onnx.ModelProto):
        model, base = source, None
    elif isinstance(source, bytes | bytearray):
        try:
            model = onnx.load_model_from_string(bytes(source))
        except (DecodeError, ValueError, RuntimeError) as err:
            raise ModelLoadError(f"the bytes given are not an ONNX model ({err})") from None
        base = None
    else:
        path = Path(source)
        check(
            path.exists() or not path.is_symlink(),
            f"model file '{path}' is a symbolic link that leads nowhere (a loop, or a missing "
            "target); point it at the model file",
            ModelLoadError,
        )
        check(path.exists(), f"model file '{path}' not found; check the path", ModelLoadError)
        check(path.is_file(), f"'{path}' is a folder, not an ONNX model file", ModelLoadError)
        check(
            path.stat().st_size > 0,
            f"model file '{path}' is empty (0 bytes); re-export the model",
            ModelLoadError,
        )
        try:
            model = onnx.load(str(path), load_external_data=False)
        except (DecodeError, ValueError, RuntimeError, OSError) as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ModelLoadError(
                f"'{path}' is not a readable ONNX model (truncated or not ONNX: {reason}); "
                "re-export it or check the path"
            ) from None
        base = path.parent
    check(
        model.HasField("graph") and len(model.graph.node) > 0,
        "the model has no graph nodes; is it an ONNX model? re-export it",
        ModelLoadError,
    )
    _check_external_data(model, base)
    return model, base


def read_model_with_data(source: ModelSource) -> onnx.ModelProto:
    """As :func:`read_model`, with every external tensor's data read in (what rewriting the
    model, or running it, needs); the same checks, so a bad file is one clear error."""
    model, base = read_model(source)
    if base is not None and any(
        external_data_helper.uses_external_data(t) for t in _all_initializers(model.graph)
    ):
        model = onnx.ModelProto.FromString(model.SerializeToString())  # the caller's stays lazy
        external_data_helper.load_external_data_for_model(model, str(base))
    return model


def _check_external_data(model: onnx.ModelProto, base: Path | None) -> None:
    for tensor in _all_initializers(model.graph):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        check(
            base is not None,
            f"initializer '{tensor.name}' lives in external file '{location}'; load the model "
            "from its file path so the data can be found",
            ModelLoadError,
        )
        assert base is not None
        inside = (base / location).resolve().is_relative_to(base.resolve())
        check(
            inside and not Path(location).is_absolute(),
            f"external data '{location}' of initializer '{tensor.name}' lies outside the "
            f"model's folder '{base}'; refused: keep the data file next to the model",
            ModelLoadError,
        )
        check(
            (base / location).is_file(),
            f"external data file '{location}' for initializer '{tensor.name}' not found in "
            f"'{base}'; keep it next to the model file",
            ModelLoadError,
        )


def _all_initializers(graph: onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t


def load_tensor_data(tensor: onnx.TensorProto, base: Path | None) -> onnx.TensorProto:
    """Return ``tensor`` with its external data read in (a copy; the model is untouched)."""
    if not external_data_helper.uses_external_data(tensor):
        return tensor
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    external_data_helper.load_external_data_for_tensor(copy, str(base))
    copy.data_location = onnx.TensorProto.DEFAULT
    del copy.external_data[:]
    return copy


def default_opset(model: onnx.ModelProto) -> int:
    """The default-domain opset, checked to be one the tool reads.

    Raises:
        ModelLoadError: no default-domain import, or an opset outside [9, onnx's newest].
    """
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    check(versions, "the model imports no default ONNX opset; re-export it", ModelLoadError)
    opset, newest = versions[0], onnx.defs.onnx_opset_version()
    check(
        MIN_OPSET <= opset <= newest,
        f"unsupported opset {opset}: this tool reads opsets {MIN_OPSET} to {newest}; convert "
        "the model with onnx.version_converter.convert_version(model, 17)",
        ModelLoadError,
    )
    return opset


def node_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """Unique, non-empty names for nodes: the user's own where given, else ``OpType_<index>``."""
    names: list[str] = []
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        base = node.name or f"{node.op_type}_{i}"
        name, k = base, 1
        while name in seen:
            name, k = f"{base}__{k}", k + 1
        seen.add(name)
        names.append(name)
    return names


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Outer-scope tensors read by the node's subgraphs (If/Loop/Scan bodies)."""
    reads: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            defined = {i.name for i in g.input} | {t.name for t in g.initializer}
            for inner in g.node:
                defined.update(inner.output)
            for inner in g.node:
                reads |= {t for t in inner.input if t and t not in defined}
                reads |= _subgraph_reads(inner) - defined
    return reads


def topological_order(graph: onnx.GraphProto, names: Sequence[str]) -> list[int]:
    """Node indices in a topological order (stable: original order where it is free).

    Raises:
        GraphError: a tensor produced twice, a tensor read that nothing produces, or a cycle.
    """
    producer: dict[str, int] = {}
    sources = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    for i, node in enumerate(graph.node):
        for t in node.output:
            if not t:
                continue
            if t in producer:
                raise GraphError(
                    f"tensor '{t}' is produced by both '{names[producer[t]]}' and '{names[i]}'; "
                    "every tensor needs exactly one producer: re-export or rename it"
                )
            check(
                t not in sources,
                f"tensor '{t}' produced by '{names[i]}' is also a graph input or initializer; "
                "every tensor needs exactly one producer: re-export or rename it",
            )
            producer[t] = i
    deps: list[set[int]] = []
    for i, node in enumerate(graph.node):
        reads = {t for t in node.input if t} | _subgraph_reads(node)
        mine: set[int] = set()
        for t in reads:
            if t in producer:
                mine.add(producer[t])
            else:
                check(
                    t in sources,
                    f"op '{names[i]}' reads tensor '{t}' that no op, input or initializer "
                    "produces; the model is malformed",
                )
        deps.append(mine)
    users: list[list[int]] = [[] for _ in graph.node]
    indeg = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i, n in enumerate(indeg) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in users[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(deps):
        left = set(range(len(deps))) - set(order)
        g = nx.DiGraph((j, i) for i in left for j in deps[i] if j in left)
        cycle = [names[a] for a, _ in nx.find_cycle(g)]
        raise GraphError(
            "the graph has a cycle: "
            + " -> ".join([*cycle, cycle[0]])
            + "; ONNX graphs must be acyclic"
        )
    return order


def parse_input_shapes(specs: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=1x128`` strings (the ``--input-shape`` flag).

    Raises:
        ModelLoadError: a spec that is not NAME=DIMxDIM... with positive integer dims.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        parts = dims.lower().replace(",", "x").split("x") if sep else []
        ok = bool(name) and bool(parts) and all(p.strip().isdigit() for p in parts)
        check(
            ok and all(int(p) > 0 for p in parts),
            f"--input-shape expects NAME=DIMxDIM with positive integers (e.g. input_ids=1x128), "
            f"but got '{spec}'",
            ModelLoadError,
        )
        shapes[name] = tuple(int(p) for p in parts)
    return shapes


def declared_dims(vi: onnx.ValueInfoProto) -> list[int | str] | None:
    """A graph input's dims as the model declares them: ints, dim_param strings (``?`` for an
    unnamed dynamic dim), or None without a tensor shape."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return None
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def static_input_dims(
    graph: onnx.GraphProto,
    input_shapes: Mapping[str, Sequence[int]],
    weight_names: set[str],
) -> dict[str, tuple[int, ...]]:
    """Static dims of every fed graph input, with the user's overrides applied.

    Raises:
        ModelLoadError: an override names no input or has the wrong rank; a non-tensor input.
        DynamicShapeError: inputs left dynamic, all named in one line with the flag to use.
    """
    inits = {t.name for t in graph.initializer}
    fed = [vi for vi in graph.input if vi.name not in inits]
    names = [vi.name for vi in fed]
    unknown = sorted(set(input_shapes) - set(names))
    check(
        not unknown,
        f"--input-shape names {', '.join(map(repr, unknown))}, which is not a graph input; "
        f"inputs: {', '.join(names)}",
        ModelLoadError,
    )
    result: dict[str, tuple[int, ...]] = {}
    dynamic: list[tuple[str, list[int | str] | None]] = []
    for vi in fed:
        check(
            vi.type.HasField("tensor_type"),
            f"graph input '{vi.name}' is not a tensor (sequence/map inputs are not supported)",
            ModelLoadError,
        )
        dims = declared_dims(vi)
        if vi.name in input_shapes:
            given = tuple(input_shapes[vi.name])
            check(
                dims is None or len(dims) == len(given),
                f"--input-shape {vi.name} has rank {len(given)}, but the model declares "
                f"rank {len(dims or [])} {_fmt(dims)}",
                ModelLoadError,
            )
            check(
                dims is None
                or all(
                    isinstance(d, str) or d in (0, g) for d, g in zip(dims, given, strict=True)
                ),
                f"--input-shape {vi.name}={'x'.join(map(str, given))} conflicts with the "
                f"model's static dims {_fmt(dims)}",
                ModelLoadError,
            )
            result[vi.name] = given
        elif dims is None or any(isinstance(d, str) or d < 0 for d in dims):
            dynamic.append((vi.name, dims))
        else:
            result[vi.name] = tuple(int(d) for d in dims)
    if dynamic:
        listed = ", ".join(f"{name} {_fmt(dims)}" for name, dims in dynamic)
        flags = " ".join(
            f"--input-shape {name}=" + "x".join(str(example_dim(d)) for d in (dims or ["?"]))
            for name, dims in dynamic
        )
        raise DynamicShapeError(
            f"dynamic graph input(s) {listed}: give each a static shape, e.g. {flags}"
        )
    return result


def _fmt(dims: Sequence[int | str] | None) -> str:
    return "[" + ", ".join(map(str, dims)) + "]" if dims is not None else "[unknown rank]"


# Protobuf cannot serialise a message of 2 GiB or more; larger models keep weights outside.
_PROTO_LIMIT = (1 << 31) - (64 << 20)


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    """Save an ONNX model atomically; past protobuf's 2 GiB limit weights go to ``<file>.data``."""
    out = output_path(path)
    if model.ByteSize() < _PROTO_LIMIT:
        return atomic_write_bytes(out, model.SerializeToString())
    data_name = out.name + ".data"
    try:
        with tempfile.TemporaryDirectory(prefix=".autotune-", dir=out.parent) as tmp:
            staged = Path(tmp) / out.name
            onnx.save_model(
                model,
                str(staged),
                save_as_external_data=True,
                all_tensors_to_one_file=True,
                location=data_name,
            )
            os.replace(Path(tmp) / data_name, out.parent / data_name)
            os.replace(staged, out)
    except OSError as exc:
        raise write_error(out, exc) from None
    return out
