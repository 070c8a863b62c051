"""``autotune run``'s arrays: the inputs it reads from an .npz (never unpickled), checked
against the model's inputs, and the outputs it writes as one (atomically)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from search_space.ir import Graph

__all__ = ["check_feeds", "read_inputs", "write_outputs"]


def read_inputs(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz by name, read without pickle.

    Raises:
        AutotuneError: the file is missing, not an .npz, or holds an object array (naming it).
    """
    import zipfile

    import numpy as np

    from autotune.exceptions import AutotuneError

    if not path.is_file():
        raise AutotuneError(f"inputs file '{path}' not found")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        raise AutotuneError(
            f"inputs file '{path}' is not an .npz of arrays (np.savez writes one)"
        ) from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise AutotuneError(f"inputs file '{path}' is one .npy array; give an .npz by input name")
    arrays: dict[str, np.ndarray] = {}
    with data:
        for name in data.files:
            try:
                arrays[name] = data[name]
            except ValueError:  # an object array: reading it would unpickle
                raise AutotuneError(
                    f"input '{name}' in '{path}' is an object array, which is never unpickled; "
                    "save plain numeric arrays"
                ) from None
            except (OSError, EOFError, zipfile.BadZipFile) as exc:
                raise AutotuneError(f"input '{name}' in '{path}' is unreadable: {exc}") from None
    return arrays


def check_feeds(feeds: dict[str, np.ndarray], graph: Graph) -> None:
    """Every input of the model given, of its shape and dtype, and nothing else.

    Raises:
        CodegenError: naming the first input that is not.
    """
    from autotune.codegen import CodegenError
    from autotune.codegen.runtime import check_inputs

    expected = {
        t: (tuple(graph.tensors[t].static_shape), graph.tensors[t].dtype) for t in graph.inputs
    }
    try:
        check_inputs(feeds, expected)
    except ValueError as exc:
        raise CodegenError(str(exc)) from None


def write_outputs(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """``arrays`` as an .npz at ``path`` (atomic; any name a key, no pickle)."""
    import io
    import zipfile

    import numpy as np

    from search_space.atomic import atomic_write_bytes

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, value in arrays.items():  # np.savez's layout; a key may be any string
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asarray(value), allow_pickle=False)
    return atomic_write_bytes(path, buf.getvalue())
