"""Reading a tableau's JSON file: one JSON object, or a ValueError naming the file and the problem."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["read_json_object"]


def read_json_object(path: str, origin: str) -> dict[str, Any]:
    """The JSON object in the file `path`.

    Parameters
    ----------
    path : str
    origin : str
        How messages name the file, e.g. ``"tableau file 'rk.json'"``.

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        A missing file, a directory, invalid JSON or UTF-8, or JSON that is
        not an object.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ValueError(f"{origin} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{origin} is a directory, not a JSON file") from None
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{origin} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
        ) from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{origin} is not UTF-8 text: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{origin} must contain a JSON object, got {type(data).__name__}")
    return data
