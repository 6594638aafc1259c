"""`shooting-codegen`: list models and tableaus, inspect a tableau, export integrators and controllers as C, run MPC.

Exit status: 0 success, 1 a failed check, 2 bad usage or input (one line on
stderr, no traceback). Output is assembled in a temporary directory and moved
into place only when everything succeeded; files the tool did not write are
never deleted or overwritten.
"""

from __future__ import annotations

import sys
from pathlib import PurePath

from shooting import _interrupt

#: Running as the program (console script or ``python -m shooting.cli``), not called by a library user.
_PROGRAM = __name__ == "__main__" or PurePath(sys.argv[0]).name == "shooting-codegen"
if _PROGRAM:
    # A Ctrl-C during the imports below is recorded and stops the run as soon
    # as `main` starts (exit 130), never a traceback.
    _interrupt.defer()

import argparse  # noqa: E402 - after the deferral above, on purpose
import atexit  # noqa: E402
import contextlib  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any, NoReturn  # noqa: E402

# Only light modules at import time: `main` takes over Ctrl-C first, then the
# commands import CasADi, numpy and matplotlib (through the lazy package root
# and the imports inside the functions below).
import shooting  # noqa: E402
from shooting import _cli_text  # noqa: E402
from shooting._cli_parser import build_parser  # noqa: E402
from shooting._cli_text import UsageError  # noqa: E402
from shooting._cli_text import model_args as _model_args  # noqa: E402
from shooting._cli_text import parse_vector as _parse_vector  # noqa: E402
from shooting._cli_text import parse_weight as _parse_weight  # noqa: E402

if TYPE_CHECKING:
    from shooting.codegen.pipeline import ExportReport

__all__ = ["main"]


class _Progress:
    """Stage lines on stderr with elapsed seconds (quiet with -q)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.t0:6.1f} s] {message}", file=sys.stderr, flush=True)


def cmd_list(args: argparse.Namespace) -> int:
    if args.model is not None:
        return _describe(shooting.load_model(args.model, **_model_args(args.model_arg)), args.model)
    if args.model_arg:
        raise UsageError("--model-arg has no effect without --model: add --model")
    print("Models (shooting.load_model / --model):")
    for name in shooting.model_names():
        m = shooting.load_model(name)
        nz = f"nz={m.nz:<2}" if m.nz else " " * 5
        print(f"  {name:<14} nx={m.nx:<3} nu={m.nu:<2} np={m.np:<2} {nz} {m.description}")
        named = shooting.scenario_names(m)[1:]
        if named:
            print(f"  {'':<14} scenarios (mpc --scenario): default, {', '.join(named)}")
    print("\nTableaus (--method):")
    for name in shooting.tableau_names():
        t = shooting.get_tableau(name)
        kind = "explicit" if t.explicit else "implicit"
        emb = f", embedded order {t.embedded_order}" if t.b_hat is not None else ""
        print(f"  {name:<18} order {t.order}{emb}, {t.stages} stages, {kind}")
    return 0


def _describe(m: shooting.Model, spec: str) -> int:
    """One model in words: what `list --model` prints."""
    print(f"{m.name} ({spec}): {m.description or 'no description'}")
    print(f"  dt = {m.dt:g} {m.time_unit}" if m.dt else f"  no nominal dt (time in {m.time_unit})")

    def rows(title: str, names: Sequence[str], units: Sequence[str], *columns: tuple[str, Any]) -> None:
        if not names:
            return
        print(f"  {title}:")
        for i, name in enumerate(names):
            unit = f" [{units[i]}]" if units and units[i] else ""
            print(f"    {name + unit:<20} " + ", ".join(f"{label} {float(v[i]):g}" for label, v in columns))

    rows(f"states (nx = {m.nx})", m.state_names, m.state_units, ("x0", m.x0), ("min", m.x_min), ("max", m.x_max))
    rows(f"inputs (nu = {m.nu})", m.input_names, m.input_units, ("u0", m.u0), ("min", m.u_min), ("max", m.u_max))
    rows(f"parameters (np = {m.np})", m.param_names, (), ("p0", m.p0))
    rows(f"algebraic states (nz = {m.nz})", m.algebraic_names, (), ("z0", m.z0))
    print(f"  scenarios (--scenario): {', '.join(shooting.scenario_names(m))}")
    return 0


def _tableau(spec: str) -> shooting.ButcherTableau:
    if spec.endswith(".json") or Path(spec).is_file():
        return shooting.load_tableau(spec)
    return shooting.get_tableau(spec)


def cmd_tableau(args: argparse.Namespace) -> int:
    tab = _tableau(args.name)
    print(tab)
    print(f"verified order {tab.verified_order()}"
          + (f", embedded order {tab.verified_order(embedded=True)}" if tab.b_hat is not None else ""))
    print(f"A-stable {tab.is_a_stable()}, L-stable {tab.is_l_stable()}, explicit {tab.explicit}")
    if args.plot:
        path = tab.plot_stability_region(args.plot)
        print(f"stability region written to {path}")
    return 0


def _lint(model: shooting.Model, method: str | shooting.ButcherTableau, steps: int, dt: float,
          x: object) -> None:
    """Warn on stderr (and go on) when the step is outside its stability region at the operating point."""
    report = shooting.check_stability(model, method, steps, dt, x=x)  # type: ignore[arg-type]
    if not report.stable:
        _stderr(f"shooting-codegen: warning: {report.message} (--no-lint silences this)")


def _stderr(message: object) -> None:
    """One line on stderr: every problem, warning and error the CLI prints goes through here.

    A message composed from a solver's status, a CasADi error or a numpy
    array may hold newlines; they are collapsed, so that each message is one
    line (a log reader or a test takes one line per message).
    """
    from shooting._validate import one_line  # (local: the module's imports stay as they are)

    print(one_line(message), file=sys.stderr, flush=True)


@contextlib.contextmanager
def _warning_lines() -> Iterator[None]:
    """Show the library's warnings (e.g. a weighted reference beyond a bound) as one line each on stderr."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: object = None, line: str | None = None) -> None:
        print(f"shooting-codegen: warning: {' '.join(str(message).split())}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _print_report(report: ExportReport, out: str) -> bool:
    """Print an export's lines (its problems on stderr); False when its check failed and nothing was written."""
    for line in report.lines:
        if line not in report.problems:
            print(line)
    for problem in report.problems:  # (a failed check's line, with its explanation, on stderr)
        _stderr(problem)
    if not report.ok:
        what = "check failed" if report.checks else "failed"
        if report.files:
            _stderr(f"{what}: the rejected export is kept in {out} beside CHECK_FAILED.txt (do not deploy it)")
        else:
            _stderr(f"{what}: nothing written to {out}" + (" (--keep-failed keeps the rejected export beside a note)"
                                                            if report.checks else ""))
    return report.ok


def _refuse_ineffective(rules: Sequence[tuple[str, bool, str, str]]) -> None:
    """Exit 2 (a UsageError) for the first option given where it would have no effect.

    Each rule is ``(option, given where it has no effect, why, fix)``; the
    message reads "OPTION has no effect WHY: FIX or drop OPTION". An option
    the run would silently ignore is a mistake like an unknown one: the
    user expected something of it.
    """
    for option, ineffective, why, fix in rules:
        if ineffective:
            drop = option if fix.startswith("drop ") else f"drop {option}"
            raise UsageError(f"{option} has no effect {why}: {fix} or {drop}")


def _scenario_states(model: shooting.Model) -> list[list[float]]:
    """Where the plant of the model's default scenario will be: its start, and its state references (a time-varying
    one at five times over the closed loop, else the OCP's), which the integrator's check vectors are drawn
    around."""
    import numpy as np

    scenario = shooting.default_scenario(model)
    states = [np.asarray(scenario.x0, dtype=float)]
    if scenario.reference is not None:
        span = scenario.sim_steps * scenario.problem.dt
        data = [shooting.sample_horizon(model, t, scenario.problem.dt, 0, reference=scenario.reference)
                for t in np.linspace(0.0, span, 5)]
        states += [d.x_ref[0] for d in data if d.x_ref is not None]
    elif scenario.problem.cost.x_ref is not None:
        states.append(np.asarray(scenario.problem.cost.x_ref, dtype=float).reshape(-1, model.nx)[-1])
    unique = {tuple(float(v) for v in s) for s in states}
    return [list(s) for s in sorted(unique)]


def cmd_integrator(args: argparse.Namespace) -> int:
    from shooting.codegen import check_export, export_integrator

    progress = _Progress(args.quiet)
    if args.tableau_file and args.method:
        raise UsageError("give either --method or --tableau-file, not both")
    # Refused before any long work: a bad name or directory, a missing tool.
    check_export(args.out, args.name, real=args.real, target=args.target, check=args.check, force=args.force)
    model = shooting.load_model(args.model, **_model_args(args.model_arg))
    tab = shooting.load_tableau(args.tableau_file) if args.tableau_file else \
        shooting.get_tableau(args.method or "rk4")
    dt = args.dt or model.dt
    if dt is None:
        raise UsageError(f"model {model.name} has no nominal dt: pass --dt")

    _refuse_ineffective([
        ("--vectors", args.vectors is not None and not args.check and args.real == "double",
         "without --check (or --real float, whose float-vs-double error it measures)", "add --check"),
        *((option, given and tab.explicit and not model.is_dae,
           f"with the explicit tableau {tab.name} (no Newton solve on an ODE)", "choose an implicit method")
          for option, given in (("--newton-iterations", args.newton_iterations is not None),
                                ("--newton", args.newton is not None))),
    ])
    if not args.no_lint:
        _lint(model, tab, args.steps, dt, None)
    progress(f"building {tab.name} x {args.steps} step(s) of {model.name} ({args.sensitivities} sensitivities)")
    F = shooting.build_integrator(model, tab, args.steps, args.sensitivities,
                                  newton_iterations=args.newton_iterations, newton=args.newton or "full",
                                  name=args.name)
    report = export_integrator(F, args.out, real=args.real, target=args.target, check=args.check,
                               force=args.force, dt=dt, metadata={"model_spec": args.model}, progress=progress,
                               check_states=_scenario_states(model),
                               **({} if args.vectors is None else {"vectors": args.vectors}))
    if not _print_report(report, args.out):
        return 1
    print(f"{args.out}/{report.name}.c, {report.name}.h, manifest.json, Makefile")
    return 0


def _scenario(args: argparse.Namespace, model: shooting.Model, changes: dict[str, object],
              options: tuple[str, ...]) -> shooting.Scenario:
    """The model's scenario (--scenario, else the default) with the command's overrides, linted.

    Overrides: --x0, --R-delta, the discretisation and `options`.
    """
    if args.x0 is not None:
        changes["x0"] = _parse_vector(args.x0, model.nx, "--x0", model.name)
    if args.R_delta is not None:
        changes["R_delta"] = _parse_weight(args.R_delta, model.nu, "--R-delta", model.name)
    for option in ("horizon", "dt", "method", "steps", *options):
        if getattr(args, option) is not None:
            changes[option] = getattr(args, option)
    scenario = shooting.named_scenario(model, getattr(args, "scenario", "default")).with_changes(**changes)
    if not args.no_lint:
        _lint(model, scenario.problem.method, scenario.problem.steps, scenario.problem.dt, scenario.x0)
    return scenario


def cmd_mpc(args: argparse.Namespace) -> int:
    with _warning_lines():
        return _run_mpc(args)


def _run_mpc(args: argparse.Namespace) -> int:
    from shooting.mpc.run import run_scenario

    progress = _Progress(args.quiet)
    model = shooting.load_model(args.model, **_model_args(args.model_arg))
    changes: dict[str, object] = {}
    if args.x_ref is not None:
        changes["x_ref"] = _parse_vector(args.x_ref, model.nx, "--x-ref", model.name)
    import warnings

    from shooting.mpc.nlp_cache import NLPCacheWarning, compile_nlp_default

    if args.compile_nlp is None:
        args.compile_nlp = compile_nlp_default(False)
    scenario = _scenario(args, model, changes, ("sim_steps", "hessian", "compile_nlp"))
    _refuse_ineffective([
        ("--seed", args.seed is not None and not args.noise, "without --noise-std (it seeds the noise)",
         "add --noise-std STD"),
        ("--x-ref", args.x_ref is not None and scenario.reference is not None,
         f"with --scenario {args.scenario}, whose reference varies in time", "choose another scenario"),
    ])
    with warnings.catch_warnings(record=True) as caught:  # the cache's fallback: one line, not a Python warning
        warnings.simplefilter("always", NLPCacheWarning)
        run = run_scenario(scenario, args.out, model=model, rti=args.rti, noise_std=args.noise,
                           seed=0 if args.seed is None else args.seed,
                           force=args.force, progress=progress, progress_bar=not args.quiet,
                           metadata={"model": {"spec": args.model}})
    for w in caught:
        if issubclass(w.category, NLPCacheWarning):
            _stderr(f"shooting-codegen: warning: {w.message} (--no-compile-nlp: not tried)")
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    for line in run.lines:
        print(line)
    for line in run.problems:
        _stderr(f"shooting-codegen: {line}")
    if run.files:
        print(f"{args.out}/" + ", ".join(f.name for f in run.files))
    return 0 if run.ok else 1


def cmd_controller(args: argparse.Namespace) -> int:
    with _warning_lines():
        return _run_controller(args)


def _run_controller(args: argparse.Namespace) -> int:
    from shooting.controller import check_controller_export, export_controller
    from shooting.controller.firmware_estimator import board_ekf

    progress = _Progress(args.quiet)
    slack = [("--slack-l1", args.slack_l1 is not None), ("--slack-l2", args.slack_l2 is not None)]
    _refuse_ineffective([
        ("--check-steps", args.check_steps is not None and not args.check, "without --check", "add --check"),
        ("--check-noise", args.check_noise is not None and not args.check, "without --check", "add --check"),
        ("--check-x0", args.check_x0 is not None and not args.check, "without --check", "add --check"),
        ("--estimator", args.estimator is not None and args.firmware is None, "without --firmware",
         "add --firmware stm32f405"),
        ("--measurement-noise", args.measurement_noise is not None and args.estimator is None,
         "without --estimator", "add --estimator ekf"),
    ])
    check_controller_export(args.out, args.name, real=args.real, target=args.target, check=args.check,
                            force=args.force)
    model_args = _model_args(args.model_arg)
    model = shooting.load_model(args.model, **model_args)
    scenario = _scenario(args, model, {"soft_x_bounds": not args.hard_x_bounds}, ("slack_l1", "slack_l2"))
    has_path = scenario.problem.constraints.path_constraints is not None
    _refuse_ineffective([("--hard-path-constraints", args.hard_path_constraints and not has_path,
                          f"here: the scenario of {model.name} has no path constraints", "add path_constraints")])
    scenario = scenario.with_changes(soft_path_constraints=has_path and not args.hard_path_constraints)
    progress(f"building the OCP of {model.name} (N = {scenario.problem.horizon}, dt = {scenario.problem.dt:g})")
    ocp = shooting.build_ocp(scenario, model)
    bounded = any(math.isfinite(v) for v in [*ocp.x_min, *ocp.x_max])
    soft_rows = has_path and not args.hard_path_constraints
    _refuse_ineffective([(option, given and args.hard_x_bounds and not soft_rows,
                          "with --hard-x-bounds (hard bounds have no slacks)", "drop --hard-x-bounds")
                         for option, given in slack])
    _refuse_ineffective([(option, given and not bounded and not soft_rows,
                          f"here: the OCP of {model.name} has neither state bounds nor soft path constraints",
                          "bound a state or add path_constraints") for option, given in slack])
    check_x0 = None if args.check_x0 is None else _parse_vector(args.check_x0, model.nx, "--check-x0", model.name)
    estimator = None if args.estimator is None else board_ekf(model, ocp.dt, scenario.x0 if check_x0 is None
                                                              else check_x0, args.measurement_noise or 0.0)
    report = export_controller(ocp, args.out, real=args.real, target=args.target, check=args.check,
                               force=args.force, name=args.name, x0=scenario.x0, check_x0=check_x0,
                               estimator=estimator, measurement_noise=args.measurement_noise or 0.0,
                               reference=scenario.reference,
                               **({} if args.check_steps is None else {"check_steps": args.check_steps}),
                               check_noise=args.check_noise or 0.0, max_qp_iterations=args.max_qp_iterations,
                               max_sqp_iterations=args.max_sqp_iterations, keep_failed=args.keep_failed,
                               hessian=args.hessian, firmware=args.firmware,
                               metadata={"model_spec": args.model, "model_args": model_args, "qp_solver": args.qp},
                               progress=progress)
    if not _print_report(report, args.out):
        return 1
    print(f"{args.out}/" + ", ".join(p.relative_to(args.out).as_posix() for p in report.files))
    return 0


def cmd_estimator(args: argparse.Namespace) -> int:
    import numpy as np

    from shooting.codegen import check_export, export_estimator
    from shooting.estimate.measurement import sensor_count

    progress = _Progress(args.quiet)
    _refuse_ineffective([("--horizon", args.horizon is not None and args.kind == "ekf", "with --kind ekf",
                          "drop --horizon")])
    name = args.name or None
    check_export(args.out, name or "estimator", real=args.real, target=args.target, check=args.check,
                 force=args.force)
    model = shooting.load_model(args.model, **_model_args(args.model_arg))
    dt = args.dt or model.dt
    if dt is None:
        raise UsageError(f"model {model.name} has no nominal dt: pass --dt")
    if not args.no_lint:
        _lint(model, args.method, args.steps, dt, None)
    ny = sensor_count(model)  # (the --R option is checked against it)
    Q = np.diag(_parse_vector(args.Q, model.nx, "--Q", model.name)) if args.Q else 1e-4 * np.eye(model.nx)
    R = np.diag(_parse_vector(args.R, ny, "--R", model.name)) if args.R else 1e-4 * np.eye(ny)
    estimator: shooting.EKF | shooting.MHE = (
        shooting.EKF(model, None, Q=Q, R=R, method=args.method, steps=args.steps, dt=dt) if args.kind == "ekf" else
        shooting.MHE(model, None, args.horizon or _cli_text.MHE_HORIZON, Q=Q, R=R, method=args.method, steps=args.steps,
                     dt=dt))
    report = export_estimator(estimator, args.out, real=args.real, target=args.target, check=args.check,
                              force=args.force, name=name, metadata={"model_spec": args.model}, progress=progress)
    if not _print_report(report, args.out):
        return 1
    print(f"{args.out}/" + ", ".join(p.name for p in report.files))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from shooting.sweeps import sweep

    _refuse_ineffective([
        ("--workers", args.workers is not None and args.scheduler is not None,
         "with --scheduler (the scheduler's workers run the cases)", "drop --scheduler"),
        ("--measurement-noise", args.measurement_noise is not None and args.estimator is None, "without --estimator",
         "add --estimator ekf"),
        ("--seed", args.seed is not None and not (args.x0_spread or args.p_spread or args.noise_std),
         "without --x0-spread, --p-spread or --noise-std (every case would be the nominal one)", "add a spread"),
    ])
    model = shooting.load_model(args.model, **_model_args(args.model_arg))
    if args.p_spread and not model.np:
        raise UsageError(f"--p-spread has no effect: model {model.name} has no parameters; drop --p-spread")
    scenario = _scenario(args, model, {}, ("sim_steps",))
    try:
        result = sweep(scenario, model=model, controller=args.controller, cases=args.cases, x0_spread=args.x0_spread,
                       p_spread=args.p_spread, noise_std=args.noise_std, seed=args.seed or 0,
                       scheduler=args.scheduler, workers=args.workers, out_dir=args.out, resume=args.resume,
                       progress=not args.quiet, estimator=args.estimator,
                       measurement_noise=args.measurement_noise or 0.0)
    except RuntimeError as err:  # a case that could not run (its workers died): the journal keeps the others
        if _interrupt.requested():
            raise KeyboardInterrupt from err
        _stderr(f"shooting-codegen: {err}: --resume runs the missing cases")
        return 1
    s = result.summary
    cost, error = (math.inf if v is None else v for v in (s["cost"]["p50"], s["final_error"]["p50"]))
    print(f"{model.name}: {s['cases']} cases ({s['cases_resumed']} resumed) on {s['run_on']['where']}, "
          f"{s['succeeded']} succeeded ({100 * s['success_rate']:.1f} %), median cost {cost:.4g}, median final "
          f"error {error:.3g} (tolerance {s['tolerance']:.3g}), {s['wall_time']:.1f} s")
    failures = s["solver_failures"]
    if failures["cases"]:  # (samples stopped by the budget or failed on the way: said, even where cases arrived)
        print(f"{failures['cases']} of {s['cases']} cases had samples that did not end ok "
              f"({s['failed_steps_total']} samples in all; cases by their most frequent reason: "
              + ", ".join(f"{reason} {count}" for reason, count in failures["reasons"].items()) + ")")
    print(f"{args.out}/" + ", ".join(p.name for p in result.files))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``shooting-codegen``; returns the exit status.

    Ctrl-C at any instant (the imports included) exits 130 with one line on
    stderr: see `shooting._interrupt`.
    """
    owner = False
    stderr = _duplicate_stderr()
    try:
        owner = _interrupt.install()
        _interrupt.check()  # a Ctrl-C during the imports
        code = _run(argv)
        _interrupt.check()  # one that came at the very end (the files are installed): still 130
    except KeyboardInterrupt:
        code = _interrupted(stderr)
    except BrokenPipeError:
        # The reader of stdout went away (`shooting-codegen list | head`):
        # not an error of ours; silence the interpreter's flush at exit too.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141
    except BaseException as err:
        # A Ctrl-C that a C extension turned into its own error (CasADi's
        # SystemError from a DM -> numpy conversion, a RuntimeError) is still
        # an interruption, not a crash.
        if _interrupt.requested() or _caused_by_interrupt(err):
            code = _interrupted(stderr)
        else:
            raise
    finally:
        if owner and not _PROGRAM:
            _interrupt.uninstall()
        if stderr is not None and not _PROGRAM:
            os.close(stderr)
    if _PROGRAM:
        _leave(code)
    return code


def _duplicate_stderr() -> int | None:
    """A copy of file descriptor 2 as the run starts (None without one), for `_interrupted`."""
    try:
        return os.dup(2)
    except OSError:
        return None


def _interrupted(stderr: int | None) -> int:
    """Acknowledge the interrupt and say so: one line on the run's stderr (`stderr`, its fd 2 as it started).

    fd 2 is put back first: an interrupt can reach the top while a library
    block has it redirected (`shooting._solver_call` sends CasADi's output to
    a file), and the line went there once (exit 130, no word).
    """
    _interrupt.acknowledge()
    if stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            os.dup2(stderr, 2)
    print("shooting-codegen: interrupted", file=sys.stderr)
    if _PROGRAM:
        # An extension stopped in the middle of its work (IPOPT, a CasADi
        # evaluation) can crash the interpreter's finalisation ("Fatal Python
        # error: PyThreadState_Get" was seen): our output is already complete
        # or absent and nothing else needs finalising, so leave at once.
        _leave(130)
    return 130


def _leave(code: int) -> NoReturn:
    """End the program now, with `code`, while Ctrl-C is only recorded.

    The interpreter's finalisation restores SIGINT's default action (the
    process would die of the signal: status -2, no message) and takes tenths
    of a second: leaving with os._exit closes that window. The exit handlers
    (temporary build folders) and the streams' flush run first, shielded.
    """
    with _interrupt.shielded():
        hook = sys.unraisablehook
        if code == 130 or _interrupt.requested():
            # An exit handler may meet what the interrupt left half-built (logging's shutdown flushing a
            # StreamHandler whose stream was never set was seen in a sweep's Dask start): the one line
            # "interrupted" says it all, so what such a handler raises is not printed.
            sys.unraisablehook = lambda unraisable: None
        with contextlib.suppress(Exception):
            atexit._run_exitfuncs()
        sys.unraisablehook = hook
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        # The last instants: the run is complete, and a Ctrl-C that came is still 130. SIGINT is blocked first,
        # then one recorded or still pending counts (a handler runs between bytecodes: checked before the flushes,
        # one landing during them was lost, exit 0, seen once in the 30 interrupts of `sweep` of a full test run);
        # what arrives after the block dies with the process, a window of two system calls.
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        pending = hasattr(signal, "sigpending") and signal.SIGINT in signal.sigpending()
        if code != 130 and (_interrupt.requested() or pending):
            _interrupt.acknowledge()
            with contextlib.suppress(OSError):
                os.write(2, b"shooting-codegen: interrupted\n")
            code = 130
        os._exit(code)


def _run(argv: Sequence[str] | None) -> int:
    """Parse and run one command: usage and input errors become one line and exit status 2."""
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "list": cmd_list, "tableau": cmd_tableau, "integrator": cmd_integrator, "mpc": cmd_mpc,
        "controller": cmd_controller, "estimator": cmd_estimator, "sweep": cmd_sweep,
    }
    try:
        args, extra = build_parser().parse_known_args(argv)
        if extra:  # (named beside the command's own help, not the top level's)
            verb = f"shooting-codegen {args.command}" if getattr(args, "command", None) else "shooting-codegen"
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see '{verb} --help')")
        return commands[args.command](args)
    except UsageError as err:
        _stderr(f"shooting-codegen: error: {err}")
        return 2
    except ValueError as err:  # the library's user errors (bad model, tableau, numbers, ...)
        if _interrupt.requested():
            raise KeyboardInterrupt from err
        _stderr(f"shooting-codegen: error: {str(err) or type(err).__name__}")
        return 2


def _caused_by_interrupt(err: BaseException) -> bool:
    """True when a KeyboardInterrupt is in the cause/context chain of `err`."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
