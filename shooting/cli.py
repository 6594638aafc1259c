"""`shooting-codegen`: list models and tableaus, inspect a tableau, export integrators as C, run MPC.

Exit status: 0 success, 1 a failed check, 2 bad usage or input (one line on
stderr, no traceback). Output is assembled in a temporary directory and moved
into place only when everything succeeded; files the tool did not write are
never deleted or overwritten.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["main"]


class UsageError(Exception):
    """A user mistake: reported in one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, status 2 (argparse prints usage + message)
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _number(convert: Callable[[str], float], ok: Callable[[float], bool], what: str) -> Callable[[str], float]:
    """An argparse type: `convert` the text and require `ok`, else "expected <what>"."""

    def parse(text: str) -> float:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what.replace(" ", "_")
    return parse


_positive_int = _number(int, lambda v: v >= 1, "a positive integer")
_positive_float = _number(float, lambda v: math.isfinite(v) and v > 0, "a positive number")
_nonnegative_float = _number(float, lambda v: math.isfinite(v) and v >= 0, "a non-negative number")


class _Progress:
    """Stage lines on stderr with elapsed seconds (quiet with -q)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.t0:6.1f} s] {message}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shooting-codegen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    sub.add_parser("list", help="list the built-in models and tableaus", description="List the built-in models and tableaus.")

    tab = sub.add_parser("tableau", help="print a tableau, its verified order and stability",
                         description="Print a Butcher tableau with its verified order and stability flags.")
    tab.add_argument("name", help="catalogue name (see 'list') or a JSON file")
    tab.add_argument("--plot", metavar="FILE", help="write the stability region as a PNG")

    integ = sub.add_parser(
        "integrator", help="export an integrator with sensitivities as C",
        description="Build an integrator step with exact sensitivities and export it as C "
                    "(NAME.c, NAME.h, manifest.json, Makefile).")
    integ.add_argument("--model", required=True,
                       help="built-in name, file.py, file.py:function or package.module:function")
    integ.add_argument("--method", help="catalogue tableau (default rk4)")
    integ.add_argument("--tableau-file", metavar="FILE", help="a JSON tableau instead of --method")
    integ.add_argument("--steps", type=_positive_int, default=1, help="substeps per interval (default 1)")
    integ.add_argument("--dt", type=_positive_float, help="interval length for the checks and the manifest "
                                                          "(default: the model's nominal dt; dt stays an input of the C function)")
    integ.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    integ.add_argument("--name", help="C prefix and file stem (default <model>_<method>)")
    integ.add_argument("--real", choices=("double", "float"), default="double")
    integ.add_argument("--sensitivities", choices=("forward", "ad", "variational", "none"), default="forward")
    integ.add_argument("--newton-iterations", type=_positive_int, help="Newton steps for implicit tableaus")
    integ.add_argument("--newton", choices=("full", "simplified"), default="full",
                       help="implicit tableaus: full Newton (default) or one reused factorisation (smaller code)")
    integ.add_argument("--check", action="store_true",
                       help="compile, run on test vectors and compare with Python (exit 1 on mismatch)")
    integ.add_argument("--target", choices=("host", "cortex-m4"), default="host",
                       help="cortex-m4: cross-compile, report flash/RAM; with --check run on an emulated Cortex-M4")
    integ.add_argument("--vectors", type=_positive_int, default=8, help="test vectors for --check (default 8)")
    integ.add_argument("--force", action="store_true", help="write into a non-empty directory of other files")
    integ.add_argument("-q", "--quiet", action="store_true", help="no progress lines")

    mpc = sub.add_parser(
        "mpc", help="solve the model's default OCP and simulate its MPC closed loop",
        description="Build the model's default scenario (cartpole: swing-up from hanging), solve the OCP once, "
                    "run the closed loop against an accurately integrated plant and write trajectory.json, "
                    "trajectory.csv, summary.json and PNG plots. Options override the scenario.")
    mpc.add_argument("--model", required=True,
                     help="built-in name, file.py, file.py:function or package.module:function")
    mpc.add_argument("--horizon", type=_positive_int, help="shooting intervals N")
    mpc.add_argument("--dt", type=_positive_float, help="interval length and sampling time [s]")
    mpc.add_argument("--method", help="integrator tableau of the OCP (see 'list')")
    mpc.add_argument("--steps", type=_positive_int, help="integrator substeps per interval")
    mpc.add_argument("--hessian", choices=("exact", "gauss-newton"), help="Hessian of the OCP's Lagrangian")
    mpc.add_argument("--x0", metavar="V1,V2,...",
                     help="initial state, nx comma-separated numbers ('pi' allowed; "
                          "write --x0=-1,0 when the first is negative)")
    mpc.add_argument("--sim-steps", type=_positive_int, help="closed-loop steps K")
    mpc.add_argument("--rti", action="store_true", help="real-time iteration controller instead of full solves")
    mpc.add_argument("--noise", type=_nonnegative_float, metavar="STD",
                     help="standard deviation of additive process noise on every state")
    mpc.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    mpc.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    mpc.add_argument("--force", action="store_true", help="write into a non-empty directory of other files")
    mpc.add_argument("-q", "--quiet", action="store_true", help="no progress lines or bar")
    return parser


def cmd_list() -> int:
    import shooting

    print("Models (shooting.load_model / --model):")
    for name in shooting.model_names():
        m = shooting.load_model(name)
        print(f"  {name:<14} nx={m.nx:<3} nu={m.nu:<2} np={m.np:<2} {m.description}")
    print("\nTableaus (--method):")
    for name in shooting.tableau_names():
        t = shooting.get_tableau(name)
        kind = "explicit" if t.explicit else "implicit"
        emb = f", embedded order {t.embedded_order}" if t.b_hat is not None else ""
        print(f"  {name:<18} order {t.order}{emb}, {t.stages} stages, {kind}")
    return 0


def _tableau(spec: str):
    import shooting

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


def cmd_integrator(args: argparse.Namespace) -> int:
    import shooting
    from shooting import c_check, targets
    from shooting.export import check_destination, generate_c, install

    progress = _Progress(args.quiet)
    if args.tableau_file and args.method:
        raise UsageError("give either --method or --tableau-file, not both")
    out = Path(args.out)
    check_destination(out, force=args.force)
    if args.check and not targets.have_host_compiler():
        raise UsageError("gcc not found: --check compiles on the host; install gcc (apt-get install gcc)")
    if args.target == "cortex-m4":
        if not targets.have_cortex_m4_toolchain():
            raise UsageError("arm-none-eabi-gcc with newlib not found: "
                             "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi")
        if args.check and not targets.have_qemu():
            raise UsageError("qemu-system-arm (machine mps2-an386) not found: apt-get install qemu-system-arm")

    model = shooting.load_model(args.model)
    tab = shooting.load_tableau(args.tableau_file) if args.tableau_file else \
        shooting.get_tableau(args.method or "rk4")
    dt = args.dt or model.dt
    if dt is None:
        raise UsageError(f"model {model.name} has no nominal dt: pass --dt")
    name = args.name or f"{model.name}_{tab.name or 'rk'}".replace("(", "_").replace(")", "")
    name = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    if args.name and name != args.name:
        raise UsageError(f"--name {args.name!r} is not a C identifier: use letters, digits and '_'")

    progress(f"building {tab.name} x {args.steps} step(s) of {model.name} ({args.sensitivities} sensitivities)")
    F = shooting.build_integrator(model, tab, args.steps, args.sensitivities,
                                  newton_iterations=args.newton_iterations, newton=args.newton, name=name)
    metadata = {
        "model": {"name": model.name, "spec": args.model, "nx": model.nx, "nu": model.nu, "np": model.np,
                  "state_names": list(model.state_names), "input_names": list(model.input_names),
                  "expression_sha256": model.expression_hash},
        "tableau": {"name": tab.name, "order": tab.order, "stages": tab.stages, "explicit": bool(tab.explicit),
                    **tab.to_dict()},
        "steps": args.steps, "dt": dt, "sensitivities": args.sensitivities,
        "newton": None if tab.explicit else args.newton,
        "newton_iterations": None if tab.explicit else (args.newton_iterations or (
            shooting.integrator.DEFAULT_SIMPLIFIED_NEWTON_ITERATIONS if args.newton == "simplified"
            else shooting.integrator.DEFAULT_NEWTON_ITERATIONS)),
    }
    progress(f"generating C ({args.real}, {F.n_instructions()} CasADi instructions)")
    export = generate_c(F, name, real=args.real, metadata=metadata)

    failed = False
    measured: dict[str, object] = {}
    vectors = c_check.make_vectors(F, model, n=args.vectors, dt=dt)
    if args.check or (args.real == "float" and targets.have_host_compiler()):
        progress("compiling and running on the host")
        report = c_check.check_host(export, F, vectors)
        print(report.summary())
        if report.details:
            print(report.details.strip().splitlines()[0] if report.details.strip() else "", file=sys.stderr)
        measured["check_host"] = _report_dict(report)
        if args.real == "float":
            measured["float_vs_double_error"] = report.worst
        failed |= args.check and not report.passed
    if args.target == "cortex-m4":
        progress("cross-compiling for Cortex-M4")
        with tempfile.TemporaryDirectory(prefix="shooting_m4_") as tmp:
            src = Path(tmp) / f"{name}.c"
            for fname, text in export.files.items():
                (Path(tmp) / fname).write_text(text)
            res, size = targets.compile_cortex_m4(src, Path(tmp) / f"{name}.o", call_graph=export.call_graph)
            if not res.ok or size is None:
                print(f"cortex-m4 compile failed: {res.stderr.strip().splitlines()[0] if res.stderr else ''}",
                      file=sys.stderr)
                return 1
            undefined = targets.undefined_symbols(Path(tmp) / f"{name}.o")
        measured["cortex_m4"] = {"flash": size.flash, "ram": size.ram, "text": size.text, "data": size.data,
                                 "bss": size.bss, "stack": size.stack, "undefined": undefined}
        print(f"cortex-m4: flash {size.flash} B (text {size.text} + data {size.data}), "
              f"RAM {size.ram} B (data {size.data} + bss {size.bss} + worst stack {size.stack})")
        if args.real == "float":
            doubles = targets.double_precision_symbols(undefined)
            if doubles:
                print(f"float build uses double precision: {', '.join(doubles)}", file=sys.stderr)
                failed = True
        if args.check:
            progress("running on an emulated Cortex-M4 (qemu mps2-an386)")
            report = c_check.check_cortex_m4(export, F, vectors)
            print(report.summary())
            measured["check_cortex_m4"] = _report_dict(report)
            failed |= not report.passed
    if failed:
        print(f"check failed: nothing written to {out}", file=sys.stderr)
        return 1
    export = export.with_manifest(**measured)
    install(export.files, out, force=args.force)
    progress(f"wrote {', '.join(sorted(export.files))} to {out}")
    print(f"{out}/{name}.c, {name}.h, manifest.json, Makefile")
    return 0


#: Files `shooting-codegen mpc` writes; summary.json names the run as ours.
MPC_FILES = ("trajectory.json", "trajectory.csv", "summary.json", "states.png", "inputs.png", "solve_time.png")


def _parse_x0(text: str, nx: int, model_name: str) -> list[float]:
    values = []
    for i, token in enumerate(text.split(",")):
        token = token.strip()
        sign, body = (-1.0, token[1:]) if token.startswith("-") else (1.0, token.lstrip("+"))
        try:
            value = sign * math.pi if body.lower() == "pi" else float(token)
        except ValueError:
            raise UsageError(f"--x0 entry {i + 1} is {token!r}, not a number: give {nx} comma-separated numbers, "
                             f"e.g. --x0 {','.join(['0'] * nx)}") from None
        if not math.isfinite(value):
            raise UsageError(f"--x0 entry {i + 1} is {token!r}: give finite numbers")
        values.append(value)
    if len(values) != nx:
        raise UsageError(f"--x0 has {len(values)} value(s) but model {model_name} has {nx} states: give {nx} "
                         f"comma-separated numbers")
    return values


def _mpc_owned(directory: Path) -> set[str]:
    """Files an earlier `mpc` run wrote into `directory` (from its summary.json)."""
    import json

    from shooting.export import GENERATOR

    try:
        data = json.loads((directory / "summary.json").read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(data, dict) or data.get("generator") != GENERATOR or data.get("command") != "mpc":
        return set()
    return set(MPC_FILES) & {str(f) for f in data.get("files", [])}


def cmd_mpc(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    import shooting
    from shooting.closed_loop import MPCController, simulate_closed_loop
    from shooting.files import check_destination, install_directory
    from shooting.trajectory import _json_text
    from shooting.export import GENERATOR
    from shooting.scenarios import build_ocp, default_scenario

    progress = _Progress(args.quiet)
    out = Path(args.out)
    check_destination(out, MPC_FILES, _mpc_owned(out), force=args.force)
    model = shooting.load_model(args.model)
    scenario = default_scenario(model)
    changes: dict[str, object] = {}
    if args.x0 is not None:
        changes["x0"] = _parse_x0(args.x0, model.nx, model.name)
    if args.method is not None:
        shooting.get_tableau(args.method)  # an unknown name is reported before any work
        changes["method"] = args.method
    for option, name in (("horizon", "horizon"), ("dt", "dt"), ("steps", "steps"),
                         ("sim_steps", "sim_steps"), ("hessian", "hessian")):
        if getattr(args, option) is not None:
            changes[name] = getattr(args, option)
    scenario = dataclasses.replace(scenario, **changes)

    progress(f"{model.name}: {scenario.description}")
    progress(f"building the OCP: N = {scenario.horizon}, dt = {scenario.dt:g} s, {scenario.method} x "
             f"{scenario.steps}, {scenario.hessian} Hessian")
    ocp = build_ocp(scenario, model)
    first = ocp.solve(scenario.x0)
    print(f"{model.name}: OCP N = {scenario.horizon}, dt = {scenario.dt:g} s, {scenario.method} x {scenario.steps}: "
          f"{first.status}, cost {first.cost:.6g}, {first.iterations} iterations, {first.solve_time * 1e3:.1f} ms")
    if not first.success:
        print(f"shooting-codegen: the first OCP solve failed ({first.status}): nothing written to {out}",
              file=sys.stderr)
        return 1

    controller = shooting.RTIController(ocp) if args.rti else MPCController(ocp)
    kind = "rti" if args.rti else "mpc"
    progress(f"closed loop: {scenario.sim_steps} steps of {scenario.dt:g} s ({kind} controller, plant "
             f"{scenario.plant_method} x {scenario.plant_steps}"
             + (f", noise {args.noise:g}, seed {args.seed}" if args.noise else "") + ")")
    traj = simulate_closed_loop(controller, scenario.x0, scenario.sim_steps, plant_method=scenario.plant_method,
                                plant_steps=scenario.plant_steps, noise_std=args.noise or None, seed=args.seed,
                                progress=not args.quiet)
    stats = traj.stats(scenario.Q, scenario.R)
    ms = stats["solve_time_ms"]
    print(f"closed loop: {traj.steps} steps ({traj.t[-1]:g} s), solve time mean {ms['mean']:.2f} ms, "
          f"median {ms['median']:.2f} ms, p95 {ms['p95']:.2f} ms, max {ms['max']:.2f} ms, "
          f"success {100 * stats['success_rate']:.0f} %")
    print(f"final state [{', '.join(f'{v:.4g}' for v in traj.x[-1])}], "
          f"error |x_K - x_ref| = {stats['final_error']:.3g}")
    if traj.stopped:
        print(f"closed loop stopped early: {traj.stopped}", file=sys.stderr)

    summary = {
        "generator": GENERATOR, "command": "mpc", "version": shooting.__version__,
        "model": {"name": model.name, "spec": args.model, "nx": model.nx, "nu": model.nu},
        "controller": kind, "scenario": scenario.to_dict(), "noise_std": args.noise, "seed": args.seed,
        "first_solve": {"status": first.status, "success": first.success, "cost": first.cost,
                        "iterations": first.iterations, "solve_time": first.solve_time},
        "stats": stats, "files": list(MPC_FILES),
    }

    def write(tmp: Path) -> None:
        traj.save_json(tmp / "trajectory.json")
        traj.save_csv(tmp / "trajectory.csv")
        traj.plot(tmp)
        (tmp / "summary.json").write_text(_json_text(json.loads(json.dumps(summary, default=_json_default))))

    install_directory(out, write, MPC_FILES, _mpc_owned(out), force=args.force)
    progress(f"wrote {', '.join(MPC_FILES)} to {out}")
    print(f"{out}/trajectory.json, trajectory.csv, summary.json, states.png, inputs.png, solve_time.png")
    return 0


def _json_default(obj: object) -> object:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _report_dict(report) -> dict:
    return {"target": report.target, "real": report.real, "vectors": report.vectors,
            "worst_relative_error": {k: float(v) for k, v in report.worst.items()},
            "tolerance": report.tolerance, "passed": report.passed}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``shooting-codegen``; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "list":
            return cmd_list()
        if args.command == "tableau":
            return cmd_tableau(args)
        if args.command == "integrator":
            return cmd_integrator(args)
        if args.command == "mpc":
            return cmd_mpc(args)
        raise UsageError(f"unknown command {args.command!r}")
    except UsageError as err:
        print(f"shooting-codegen: error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # the library's user errors (bad model, tableau, numbers, ...)
        print(f"shooting-codegen: error: {str(err).splitlines()[0] if str(err) else type(err).__name__}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shooting-codegen: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
