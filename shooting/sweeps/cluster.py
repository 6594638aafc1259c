"""Where the cases run: in this process, on a local Dask cluster, or on a Dask scheduler given by address.

`open_pool` returns a context manager with one method, ``run(cases, spec)``,
that yields each case's row as it finishes:

* ``workers=1`` without a scheduler: in this process, one case after the other;
* otherwise a `distributed.LocalCluster` of ``workers`` processes (default:
  one per core, at most one per case) with one thread each, listening on
  127.0.0.1 only, no dashboard, its logs silenced;
* ``scheduler="tcp://host:8786"``: a running ``dask scheduler`` and its
  ``dask worker`` processes. An unreachable address, a scheduler without
  workers after a few seconds, or workers that cannot import this version
  of shooting and CasADi are a ValueError within `CONNECT_SECONDS`.

On Dask the sweep's `SweepSpec` is one task the cases depend on (sent once,
kept by each worker, recomputed if the worker holding it dies), and each case
is one task (several cases per task when there are many: `chunk_size`): a
worker process killed mid-sweep loses nothing but time, its cases run again
elsewhere. Leaving the block (normally, by an error or by
Ctrl-C) closes the client and the local cluster, and kills any worker
process of ours still alive after `CLOSE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import uuid
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from shooting import _interrupt
from shooting._version import VERSION
from shooting.sweeps.cases import Case
from shooting.sweeps.worker import SweepSpec, forget, run_case

__all__ = ["CLOSE_SECONDS", "CONNECT_SECONDS", "MAX_CHUNK", "Pool", "chunk_size", "local_cluster", "open_pool",
           "run_cases"]

#: How long connecting to a scheduler (and waiting for its first worker) may take.
CONNECT_SECONDS = 6.0
#: How long closing the client and the local cluster may take before their processes are killed.
CLOSE_SECONDS = 10.0


class Pool:
    """Runs cases somewhere (see the module docstring); use as a context manager."""

    #: What runs the cases, for the summary ("in process", "local cluster", the scheduler's address).
    where: str = "in process"
    #: How many processes run cases.
    workers: int = 1

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release what the pool holds."""

    def run(self, cases: Sequence[Case], spec: SweepSpec, trajectory: bool = False) -> Iterator[dict[str, Any]]:
        """Each case's row (`shooting.sweeps.worker.run_case`), in the order they finish."""
        try:
            for case in cases:
                _interrupt.check()
                yield run_case(case, spec, trajectory)
        finally:
            forget(spec.token)


def _worker_versions() -> tuple[str, str]:
    import casadi as ca

    return VERSION, str(ca.CasadiMeta.version())


class _DaskPool(Pool):
    def __init__(self, scheduler: str | None, workers: int) -> None:
        from distributed import Client

        self._cluster: Any = None
        self._client: Any = None
        self._level = _silence()
        try:
            if scheduler is None:
                with _interrupt.shielded():  # a cluster half started by Ctrl-C could not be closed
                    self._cluster = local_cluster(workers)
                    self._client = Client(self._cluster, set_as_default=False)
                self.where, self.workers = "local cluster", workers
            else:
                self._client = _connect(scheduler)
                self.where = scheduler
                self.workers = len(self._client.scheduler_info().get("workers", {}))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        with _interrupt.shielded():
            pids = _worker_pids(self._cluster)
            for closing in (self._client, self._cluster):
                if closing is not None:
                    with contextlib.suppress(Exception):
                        closing.close(timeout=CLOSE_SECONDS)
            for pid in pids:  # still alive after the cluster closed: ours, stopped by id
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self._client = self._cluster = None
            if self._level is not None:
                logging.getLogger("distributed").setLevel(self._level)
                self._level = None

    def run(self, cases: Sequence[Case], spec: SweepSpec, trajectory: bool = False) -> Iterator[dict[str, Any]]:
        from distributed import KilledWorker, as_completed

        client = self._client
        tag = uuid.uuid4().hex[:12]
        shipped = client.submit(_identity, spec, key=f"shooting-sweep-spec-{tag}", pure=False)
        size = chunk_size(len(cases), self.workers)
        chunks = [list(cases[i:i + size]) for i in range(0, len(cases), size)]
        futures = client.map(run_cases, chunks, spec=shipped, trajectory=trajectory,
                             key=[f"shooting-sweep-cases-{tag}-{chunk[0].index}" for chunk in chunks], pure=False)
        try:
            for future in as_completed(futures, loop=client.loop):
                _interrupt.check()
                try:
                    rows = future.result()
                except KilledWorker as err:
                    raise RuntimeError(f"a case could not run: every worker process that took it died "
                                       f"({_first_line(err)})") from None
                future.release()
                yield from rows
        finally:
            for future in futures:
                future.release()
            shipped.release()


def _identity(spec: SweepSpec) -> SweepSpec:
    return spec


#: Most cases in one Dask task.
MAX_CHUNK = 16


def chunk_size(cases: int, workers: int) -> int:
    """How many cases one Dask task runs: ``cases // (4 workers)``, at least 1 and at most `MAX_CHUNK`.

    A task costs about 5 ms of the worker's own bookkeeping (measured: its
    event loop waits for the GIL while a case computes), 10 % of a 50 ms
    case: tasks of several cases spread that cost, while every worker still
    gets at least four tasks (the balance at the end, the progress and the
    journal advance a task at a time).
    """
    return max(1, min(MAX_CHUNK, cases // (4 * max(workers, 1))))


def run_cases(cases: list[Case], spec: SweepSpec, trajectory: bool = False) -> list[dict[str, Any]]:
    """The rows of `cases`, one after the other (one Dask task)."""
    return [run_case(case, spec, trajectory) for case in cases]


def _silence() -> int | None:
    """Silence the `distributed` logger of this process (its warnings are not ours to print); its old level."""
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    return level


#: Why a local cluster's workers may fail to start, and what to do.
_MAIN_HINT = ("the local cluster's worker processes start by importing your main script: call the sweep under "
              "`if __name__ == '__main__':`, or pass workers=1 (this process)")


def local_cluster(workers: int) -> Any:
    """The local cluster a sweep starts: `workers` processes of one thread, on 127.0.0.1, quiet, SIGINT ignored."""
    import multiprocessing

    from distributed import LocalCluster

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A worker process of a local cluster is importing the user's script, which starts a sweep at import.
        raise RuntimeError(_MAIN_HINT)
    try:
        with warnings.catch_warnings():  # ("Port 8787 is already in use": its HTTP server takes another port)
            warnings.simplefilter("ignore")
            return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address=None, silence_logs=logging.CRITICAL,
                                preload=["shooting.sweeps.worker"])
    except RuntimeError as err:
        raise ValueError(f"{_first_line(err)}: {_MAIN_HINT}") from None


def _worker_pids(cluster: Any) -> list[int]:
    """The process ids of the local cluster's workers (empty for none)."""
    pids = []
    for nanny in getattr(cluster, "workers", {}).values():
        pid = getattr(getattr(nanny, "process", None), "pid", None)
        if isinstance(pid, int):
            pids.append(pid)
    return pids


def _connect(address: str) -> Any:
    """A client of the scheduler at `address` with at least one worker that runs our versions, or ValueError."""
    import dask
    from distributed import Client

    hint = "start one with 'dask scheduler' and workers with 'dask worker ADDRESS', or check --scheduler"
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": f"{CONNECT_SECONDS / 2:g}s"}):
            client = Client(address, timeout=CONNECT_SECONDS / 2, set_as_default=False)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"cannot reach the Dask scheduler at {address} ({_first_line(err)}): {hint}") from None
    try:
        try:
            client.wait_for_workers(1, timeout=CONNECT_SECONDS / 2)
        except (OSError, TimeoutError):
            raise ValueError(f"the Dask scheduler at {address} has no workers: start them with 'dask worker "
                             f"{address} --nthreads 1'") from None
        try:
            versions = client.run(_worker_versions)
        except Exception as err:  # (a worker that cannot unpickle our function: shooting is not installed there)
            raise ValueError(f"the workers of the Dask scheduler at {address} cannot run shooting "
                             f"({_first_line(err)}): install shooting {VERSION} on every worker") from None
        ours = _worker_versions()
        for worker, theirs in versions.items():
            if tuple(theirs) != ours:
                raise ValueError(f"worker {worker} of the Dask scheduler at {address} runs shooting {theirs[0]} "
                                 f"with CasADi {theirs[1]}, this process shooting {ours[0]} with CasADi {ours[1]}: "
                                 f"install the same versions on every worker")
    except BaseException:
        with contextlib.suppress(Exception):
            client.close(timeout=CLOSE_SECONDS)
        raise
    return client


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def open_pool(scheduler: str | None, workers: int | None, cases: int) -> Pool:
    """The pool that runs a sweep's `cases` (see the module docstring).

    Parameters
    ----------
    scheduler : str, optional
        The address of a Dask scheduler.
    workers : int, optional
        Local worker processes (default: one per core, at most `cases`); 1
        runs in this process. Not together with `scheduler`.
    cases : int
        How many cases will run.

    Returns
    -------
    Pool
    """
    if workers is None:
        workers = max(1, min(os.cpu_count() or 1, cases))
    if scheduler is None and workers == 1:
        return Pool()
    require_dask()
    return _DaskPool(scheduler, 0) if scheduler is not None else _DaskPool(None, workers)


#: How to install what a sweep on Dask needs.
DASK_INSTALL = "pip install 'shooting[sweep]'"


def require_dask() -> None:
    """Raise a ValueError naming the install command when Dask's `distributed` is not installed (the extra
    ``shooting[sweep]``); a sweep with one worker runs in this process without it."""
    if importlib.util.find_spec("distributed") is None:
        raise ValueError(f"a sweep on Dask needs dask.distributed, which is not installed: {DASK_INSTALL} (or "
                         f"run it in this process with workers=1 / --workers 1)")
