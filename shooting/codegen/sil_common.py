"""What the software-in-the-loop loaders share: `shooting.codegen.sil` (integrator steps) and
`shooting.controller.host` (controllers) read an export's manifest.json against a schema built from the field
checks here, refuse a manifest that disagrees with the compiled C in one message, build in a private
temporary folder, and check the compiled real type.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _files, _validate
from shooting.codegen.host_library import real_dtype
from shooting.options import REALS, Real

__all__ = ["check_real", "count_field", "dt_field", "finite_list_field", "horizon_field", "manifest_disagrees",
           "model_args_field", "name_field", "pointer", "positive_field", "private_workdir", "read_manifest",
           "real_field", "shape_field"]


def shape_field(value: object, where: str) -> None:
    """A matrix shape as the manifest records it: [rows, columns], non-negative integers."""
    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 24 for v in value)):
        raise ValueError(f"{where} must be a shape [rows, columns] of non-negative integers, got {value!r:.60}")


def name_field(value: object, where: str) -> None:
    _validate.identifier(value, where)


def real_field(value: object, where: str) -> None:
    _validate.choice(value, REALS, where)


def dt_field(value: object, where: str) -> None:
    if value is not None:
        _validate.positive_real(value, where)


def positive_field(value: object, where: str) -> None:
    _validate.positive_real(value, where)


def count_field(value: object, where: str) -> None:
    _validate.integer(value, where, minimum=0, maximum=1 << 24)


def horizon_field(value: object, where: str) -> None:
    _validate.integer(value, where, minimum=1, maximum=1 << 24)


def model_args_field(value: object, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, (int, float, str, bool)) for k, v in
            value.items()):
        raise ValueError(f"{where} must be an object of parameter names and numbers, strings or booleans")


def finite_list_field(value: object, where: str) -> None:
    if value is not None:
        _validate.array(value, where)



def read_manifest(directory: str | os.PathLike[str], controller: bool, schema: _validate.Schema
                  ) -> tuple[Path, dict[str, Any]]:
    """The export's manifest.json (a controller's or an integrator's), checked against `schema` (ValueError
    naming the field that is wrong)."""
    folder = Path(directory)
    path = folder / "manifest.json"
    if not path.exists():
        raise ValueError(f"{folder} holds no manifest.json: give the directory of an export of shooting")
    suffix = "not the manifest of an export of shooting as written; export again"
    try:
        manifest = _files.read_record(path)
    except ValueError as err:
        raise ValueError(f"{err}: {suffix}") from None
    if isinstance(manifest, dict) and (manifest.get("kind") == "controller") != controller:
        raise ValueError(f"{folder} is not a controller export (an integrator? use load_step)" if controller
                         else f"{folder} is not an integrator export with NAME_step (a controller? use "
                              f"load_controller)")
    try:
        _validate.record(manifest, schema, str(path))
    except ValueError as err:
        raise ValueError(f"{err}: {suffix}") from None
    assert isinstance(manifest, dict)
    return folder, manifest


def manifest_disagrees(path: Path, field: str, manifest_value: object, compiled: object) -> ValueError:
    return ValueError(f"{path}: {field} is {manifest_value!r:.40} but the compiled C says {compiled}: the manifest "
                      f"does not describe this C (edited or mixed up); export again")


def private_workdir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="shooting_sil_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def pointer(array: npt.NDArray[Any]) -> int:
    return int(array.ctypes.data)


def check_real(lib: ctypes.CDLL, real: Real, path: Path) -> None:
    """The manifest's real type against the C's (the buffers' dtype follows the manifest)."""
    lib.shim_real_bytes.restype = ctypes.c_long
    lib.shim_real_bytes.argtypes = []
    size = int(lib.shim_real_bytes())
    if size != np.dtype(real_dtype(real)).itemsize:
        raise manifest_disagrees(path, "real", real, f"a {size}-byte real")
