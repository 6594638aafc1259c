"""A sweep's files: the journal of finished cases, cases.csv, summary.json and sweep.png.

The journal (``DIR/.shooting-resume-sweep.jsonl``) is the only file written
while the sweep runs: a header line with the sweep's fingerprint, then one
JSON line per finished case, appended and flushed as each case finishes. It
is what ``--resume`` reads (a last line cut by a kill is ignored) and it is
removed once the output is installed. Everything else is written at the end,
all together or not at all (`shooting._files.install_directory`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shooting import _files, _interrupt
from shooting.sweeps.cases import COLUMNS, Target

__all__ = ["FILES", "JOURNAL", "RECORD", "Journal", "csv_text", "plot_png", "quantiles", "success_map"]

#: The files of a sweep's output, and the one that lists them.
FILES = ("cases.csv", "summary.json", "sweep.png")
RECORD = "summary.json"
#: The journal of finished cases, in the output directory.
JOURNAL = f"{_files.RESUME_PREFIX}sweep.jsonl"


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A row for JSON: arrays as lists (non-finite floats stay: the journal is read back by Python only)."""
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()
            if k in (*COLUMNS, "x0", "p", "error")}


class Journal:
    """The finished cases of a sweep in its output directory (see the module docstring).

    Parameters
    ----------
    out : Path
        The output directory (created, with the journal, at the first `add`).
    fingerprint : dict
        What identifies the sweep; a journal with another fingerprint is refused.
    """

    def __init__(self, out: Path, fingerprint: dict[str, Any]) -> None:
        self.out, self.path, self.fingerprint = out, out / JOURNAL, fingerprint
        self._handle: io.TextIOWrapper | None = None

    def read(self) -> list[dict[str, Any]]:
        """The rows of an earlier run of this sweep (empty without a journal).

        Raises
        ------
        ValueError
            A journal of another sweep (naming the first option that differs) or one that is not a journal.
        """
        if not self.path.is_file():
            return []
        with open(self.path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
        try:
            header = json.loads(lines[0]) if lines else None
        except json.JSONDecodeError:
            header = None
        if not isinstance(header, dict) or header.get("generator") != _files.GENERATOR:
            raise ValueError(f"{self.path} is not the journal of a sweep: delete it or choose another --out")
        theirs = header.get("fingerprint", {})
        for key, value in self.fingerprint.items():
            if theirs.get(key) != value:
                raise ValueError(f"{self.out} holds the journal of another sweep ({key} was {theirs.get(key)!r:.80}, "
                                 f"now {value!r:.80}): repeat that sweep's options, or choose another --out")
        rows = []
        for line in lines[1:]:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line, cut by a kill
            if isinstance(row, dict) and all(k in row for k in (*COLUMNS, "x0", "p")):
                row["x0"], row["p"] = np.asarray(row["x0"], dtype=float), np.asarray(row["p"], dtype=float)
                rows.append(row)
        return rows

    def add(self, row: dict[str, Any]) -> None:
        """Append a finished case (creating the directory and the journal at the first)."""
        if self._handle is None:
            # (one block for Ctrl-C: an interrupt between the directory and the journal left --out empty, neither
            # output nor journal, seen once in the 180 interrupts of six runs of test_interrupts' sweep)
            with _interrupt.shielded():
                fresh = not self.path.exists()
                self.out.mkdir(parents=True, exist_ok=True)
                self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open while cases finish
                if fresh:
                    self._handle.write(json.dumps({"generator": _files.GENERATOR, "fingerprint": self.fingerprint})
                                       + "\n")
        self._handle.write(json.dumps(_plain(row)) + "\n")
        self._handle.flush()

    def close(self) -> None:
        """Close the file (the journal stays)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def remove(self) -> None:
        """Delete the journal (the output is installed)."""
        self.close()
        if self.path.is_file():
            os.unlink(self.path)


def _cell(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, str):
        return value
    # repr: the shortest text that reads back as the same double (and inf, nan)
    return repr(float(value))  # type: ignore[arg-type]


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """cases.csv: the header `columns` and one line per row (``x0_*`` and ``p_*`` from the row's arrays)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row[c]) for c in COLUMNS] + [_cell(v) for v in (*row["x0"], *row["p"])])
    return buf.getvalue()


def quantiles(values: Sequence[float]) -> dict[str, float | None]:
    """Quantiles 0, 5, 25, 50, 75, 95, 100 % (values of the data: no interpolation; inf and nan as null)."""
    data = np.asarray(values, dtype=float)
    data = data[~np.isnan(data)]
    out: dict[str, float | None] = {}
    for q in (0, 5, 25, 50, 75, 95, 100):
        value = float(np.quantile(data, q / 100, method="inverted_cdf")) if data.size else math.nan
        out[f"p{q}"] = value if math.isfinite(value) else None
    return out


def plot_png(rows: Sequence[dict[str, Any]], worst: Sequence[dict[str, Any]], names: Sequence[str],
             target: Target, title: str, *, param_names: Sequence[str] = (), time_unit: str = "s") -> bytes:
    """sweep.png: histograms of cost and of the final error the tolerance applies to (scaled by default), success
    over the two quantities the cases vary most (start states and parameters alike), that distance of the worst
    cases from their reference over time."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 8), layout="constrained")
    ax_cost, ax_err, ax_map, ax_worst = fig.subplots(2, 2).ravel()
    ok = np.array([bool(r["success"]) for r in rows])
    tolerance = target.tolerance
    scale = np.ones(len(names)) if target.scale is None or not target.scaled else target.scale
    distance_label = "max|x - x_ref| / scale" if target.scaled else "max|x - x_ref|"
    for ax, key, label in ((ax_cost, "cost", "closed-loop cost"),
                           (ax_err, "final_error_scaled" if target.scaled else "final_error",
                            f"final error {distance_label.replace('x - ', 'x_K - ')}")):
        values = np.array([float(r[key]) for r in rows])
        finite = values[np.isfinite(values)]
        positive = finite[finite > 0]
        log = positive.size > 1 and positive.max() > 100 * positive.min()
        bins: Any = np.geomspace(positive.min(), positive.max(), 30) if log else 30
        if finite.size:
            ax.hist(positive if log else finite, bins=bins, color="tab:blue", alpha=0.8)
        if log:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("cases")
        ax.grid(alpha=0.3)
        stopped = int(values.size - finite.size)
        if stopped:
            ax.set_title(f"{stopped} case(s) diverged (not shown)", fontsize="small")
    ax_err.axvline(tolerance, color="tab:red", ls="--", lw=1.0, label=f"tolerance {tolerance:.3g}")
    ax_err.legend(fontsize="small")
    success_map(ax_map, rows, ok, names, param_names)
    for row in worst:
        distance = np.max(np.abs(np.asarray(row["x"]) - np.asarray(row["x_ref"])) / scale, axis=1)
        ax_worst.plot(row["t"], np.maximum(distance, 1e-16), lw=1.2, label=f"case {row['case']}")
    ax_worst.axhline(tolerance, color="tab:red", ls="--", lw=1.0)
    ax_worst.set_yscale("log")
    ax_worst.set_xlabel(f"t [{time_unit}]")
    ax_worst.set_ylabel(distance_label)
    ax_worst.set_title("worst cases", fontsize="small")
    if worst:
        ax_worst.legend(fontsize="small")
    ax_worst.grid(alpha=0.3, which="both")
    fig.suptitle(f"{title}: {int(ok.sum())} of {len(rows)} cases succeeded")
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def success_map(ax: Any, rows: Sequence[dict[str, Any]], ok: np.ndarray, names: Sequence[str],
                 param_names: Sequence[str] = ()) -> None:
    """Success (green) and failure (red) over the two quantities that vary most among the start states and the
    parameters, each by its spread relative to its size (max(1, |mean|): radians and kilograms compared; case number
    if nothing varies)."""
    labels = [f"x0 {n}" for n in names] + [f"p {n}" for n in param_names]
    values = np.array([np.concatenate([r["x0"], r.get("p", np.zeros(0))]) for r in rows],
                      dtype=float).reshape(len(rows), -1)[:, :len(labels)]
    spread = values.std(axis=0) / np.maximum(1.0, np.abs(values.mean(axis=0))) if len(rows) else np.zeros(len(labels))
    order = [int(i) for i in np.argsort(-spread, kind="stable") if spread[i] > 0][:2]
    index = np.array([r["case"] for r in rows], dtype=float)
    xs = values[:, order[0]] if order else index
    ys = values[:, order[1]] if len(order) > 1 else np.zeros(len(rows))
    for mask, color, label in ((ok, "tab:green", "success"), (~ok, "tab:red", "failure")):
        if mask.any():
            ax.scatter(xs[mask], ys[mask], s=12, color=color, label=label)
    ax.set_xlabel(labels[order[0]] if order else "case")
    ax.set_ylabel(labels[order[1]] if len(order) > 1 else "")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
