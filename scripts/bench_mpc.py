#!/usr/bin/env python3
"""Benchmark: shooting's multiple-shooting MPC against CasADi Opti, do-mpc and rockit.

Problem: acados' cart-pole swing-up (`shooting.load_model("cartpole")`,
x = [p, theta, v, omega], theta = 0 upright, x0 = [0, pi, 0, 0] hanging),
dt = 0.05, RK4 with one substep per interval, cost

    sum_{k<N} x_k' Q x_k + u_k' R u_k + x_N' Q_terminal x_N     (x_ref = 0, u_ref = 0)

with Q = Q_terminal = diag(1e3, 1e3, 1e-2, 1e-2), R = diag(1e-2), |F| <= 80 on
every u_k and |p| <= 2 on x_1..x_N. Every peer states exactly this NLP and
gets shooting's IPOPT options, warm-start options included (do-mpc keeps its
own single solver and unshifted warm start); see `bench_mpc_peers.py`.
"shooting (C)" is shooting with ``compile_nlp=True``: its NLP functions
compiled once per problem into the cache and loaded by later processes. The
script therefore runs on a private cache (``SHOOTING_CACHE_DIR`` set to a
temporary folder, empty at the start; the user's own cache is never read or
written) and twice: this process (the first run: its build generates C and
runs gcc) and a second process on the same cache (the cached run: its build
loads the library), and prints both side by side with the ratios to Opti
measured in the same process. In full mode a last table times shooting
variants (Gauss-Newton, jit, and solver='fatrop') as hints, not targets.

Measured per peer, interleaved over repetitions (best-of and median):
  * build: constructing the solver (not timed into any solve);
  * cold: a solve from the cold guess (states at x0, inputs 0) from hanging;
  * warm: the MPC step after a cold solve: the plant (RK4, 10 substeps) applies
    u_0, then a solve from x_1 warm-started from the previous solution; then a
    closed loop of further warm steps. All peers see the same plant states
    (those of shooting's closed loop), so every solve is the same problem.
"solve" is `time.perf_counter()` around the solver call only; "step" adds the
warm-start bookkeeping (shift, set_initial, reading the solution) a user pays
each step; "ipopt" is IPOPT's own `t_wall_total` (`stats()`).

    python scripts/bench_mpc.py            # N = 40 and N = 20, all peers and variants (a few minutes)
    python scripts/bench_mpc.py --quick    # N = 20, 2 repetitions, main peers (cached run: shooting and Opti)
    python scripts/bench_mpc.py --quick --models all   # every built-in model (the tests: ~20 s; 40 s with peers)

With ``--models`` (default: the cart-pole above) another model's problem is
its default scenario's weights, dt, start and plant with the same RK4 x 1 and
zero references; a model with algebraic states is solved by shooting alone (the
peers here state an ODE), with a line saying so. The first-run/cached-run
comparison covers every model that has peers, at every horizon; with
``--quick`` only those whose NLP has at most `QUICK_COMPILE_INSTRUCTIONS` SX
instructions (gcc's time grows with them: at N = 20 the cart-pole, 55k, about
5 s; the pendulum, the stiff chain and Van der Pol, 1-2 s each), since the
quadrotor (300k, ~20 s of gcc) and the two-link arm (494k, ~45 s) would
add over a minute; those get a row saying so. Without ``--quick`` every model
is compiled, except where the library itself refuses (more than
`shooting.mpc.nlp_compile.MAX_INSTRUCTIONS`: "fallback" in the cache column).

Peers that are not installed are skipped with a line; install them with
``pip install do-mpc rockit-meco`` (benchmark-only, not project dependencies).
All solver runs happen in a temporary directory, so nothing is written to the
current one.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import casadi as ca
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mpc_peers as peers_mod  # noqa: E402 - needs the script folder on sys.path
import shooting  # noqa: E402
from bench_mpc_peers import COMPILED, Problem, ShootingPeer  # noqa: E402
from benchkit import NAME_WIDTH, add_models_option, selected_models, skip_row  # noqa: E402
from shooting.mpc.nlp_cache import CACHE_DIR_ENV, COMPILE_ENV  # noqa: E402
from shooting.mpc.nlp_compile import instructions  # noqa: E402

Q = np.diag([1e3, 1e3, 1e-2, 1e-2])
R = np.diag([1e-2])
Q_TERMINAL = Q
DT = 0.05
ACADOS_COLD_N20 = 2.2e-3  # s, project owner's measurement: SQP (Gauss-Newton, HPIPM), N = 20
ACADOS_RTI = 80e-6  # s, one RTI step
REL_COST_TOL = 1e-4
#: With --quick, shooting (C) runs only on an NLP of at most this many SX instructions (all the uncompiled
#: solver's functions; gcc -O1 needs about 70-370 us of CPU per instruction): the cart-pole's 55k at N = 20
#: compiles in about 5 s here, the quadrotor's 300k in 20 s, the two-link arm's 494k in 45 s.
QUICK_COMPILE_INSTRUCTIONS = 100_000


def ms(t: float) -> str:
    return "-" if not np.isfinite(t) else f"{t * 1e3:.2f}"


def med(values) -> float:
    v = [x for x in values if np.isfinite(x)]
    return float(np.median(v)) if v else float("nan")


def best(values) -> float:
    v = [x for x in values if np.isfinite(x)]
    return float(min(v)) if v else float("nan")


class Record:
    """Everything measured for one peer at one horizon."""

    def __init__(self, peer) -> None:
        self.peer = peer
        self.name = peer.name
        self.build = float("nan")
        self.first = None
        self.cold: list = []
        self.warm1: list = []
        self.loop: list = []
        self.du0 = 0.0  # max |u0 - shooting's u0| over every warm step
        self.dcost_warm = 0.0  # max relative cost deviation from shooting over every warm step
        self.failed: str | None = None
        self.cache = ""  # shooting (C): how its compiled NLP was obtained ("built", "hit", "fallback")

    def summary(self) -> dict:
        """Build, cold and warm (closed-loop median) solve times [s], for the first-run/cached-run table."""
        return {"build": self.build, "cold": med([c.solve for c in self.cold]),
                "warm": med([w.solve for w in self.warm1 + self.loop]), "cost": self.cold[0].cost, "cache": self.cache}


def quiet(fn, *args):
    """Call a peer method with the third-party chatter (do-mpc's rterm warning, casadi's numpy notice) muted."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def problem_of(model: shooting.Model, N: int) -> Problem:
    """The benchmark's OCP: acados' cart-pole (module docstring), or another model's default scenario weights."""
    if model.name == "cartpole":
        return Problem(model, N, DT, Q, R, Q_TERMINAL, model.x0.copy())
    scenario = shooting.default_scenario(model)
    ocp = shooting.MultipleShootingOCP.from_problem(model, scenario.problem.with_changes(horizon=N, method="rk4",
                                                                                         steps=1))
    return Problem(model, N, ocp.dt, ocp.Q, ocp.R, ocp.Q_terminal, np.asarray(scenario.x0, dtype=float))


def plant_of(prob: Problem):
    """The plant (x, u) -> x_next: RK4 with 10 substeps per dt (another model: its scenario's plant, e.g. the
    stiff chain's radau3); a DAE's from its model's z0 guess."""
    model = prob.model
    scenario = shooting.default_scenario(model)
    method, substeps = ("rk4", 10) if model.name == "cartpole" else (scenario.plant_method, scenario.plant_steps)
    F = shooting.build_integrator(model, method, substeps, "none")
    z0 = {"z0": model.z0} if model.nz else {}
    return lambda x, u: np.array(F(x=x, u=u, p=model.p0, t0=0.0, dt=prob.dt, **z0)["x_next"]).ravel()


def nlp_instructions(peer: ShootingPeer) -> int:
    """SX instructions of every function a built (uncompiled) shooting peer's solver evaluates."""
    solver = peer.ocp.nlp_solver
    return sum(instructions(solver.get_function(name)) for name in solver.get_function())


def run_horizon(model: shooting.Model, N: int, reps: int, steps: int, variants: bool, log, *,
                only: set[str] | None = None, compile_budget: int | None = None) -> tuple[dict[str, Record], dict]:
    """Build, cold-solve and warm-step every peer (`only`: these names) at horizon N.

    Returns ({peer: Record}, {peer not run: why}); shooting (C) is not built when shooting's NLP has more SX
    instructions than `compile_budget`.
    """
    prob = problem_of(model, N)
    plant = plant_of(prob)
    peers, skipped = peers_mod.make_peers(prob, variants=variants)
    peers = [p for p in peers if only is None or p.name in only]
    for line in skipped:
        log(f"  SKIP {line}")

    recs: dict[str, Record] = {}
    dropped: dict[str, str] = {}
    for p in peers:
        r = Record(p)
        if p.name == COMPILED and compile_budget is not None and "shooting" in recs:
            size = nlp_instructions(recs["shooting"].peer)
            if size > compile_budget:
                dropped[p.name] = (f"its NLP has {size} SX instructions at N = {N}, over --quick's compile budget "
                                   f"of {compile_budget} (gcc's time grows with them); run without --quick to "
                                   f"compile it")
                log(f"  SKIP {p.name}: {dropped[p.name]}")
                continue
        t = time.perf_counter()
        try:
            quiet(p.build)
        except Exception as e:  # noqa: BLE001 - a broken peer is reported, not fatal
            dropped[p.name] = r.failed = f"build failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            log(f"  SKIP {p.name}: {r.failed}")
            continue
        r.build = time.perf_counter() - t
        report = getattr(getattr(p, "ocp", None), "nlp_cache", None)
        r.cache = report.status if report is not None else ""
        recs[p.name] = r

    # Reference closed loop (shooting): the plant states every peer is given.
    ref = recs["shooting"].peer
    res = first_ref = ref.cold(prob.x0)
    xs, u_ref, cost_ref = [prob.x0], [], []
    for _ in range(steps):
        xs.append(plant(xs[-1], res.u0))
        res = ref.warm(xs[-1])
        u_ref.append(res.u0)
        cost_ref.append(res.cost)

    for r in recs.values():
        if r.name != "shooting":
            try:
                r.first = quiet(r.peer.cold, prob.x0)
            except Exception as e:  # noqa: BLE001
                r.failed = f"solve failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
        else:
            r.first = first_ref  # shooting's first solve opened the reference loop above
    for name in [n for n, r in recs.items() if r.failed]:
        dropped[name] = recs.pop(name).failed
        log(f"  SKIP {name}: {dropped[name]}")

    for _ in range(reps):  # interleave the peers so load drift hits them alike
        for r in recs.values():
            p = r.peer
            r.cold.append(quiet(p.cold, prob.x0))
            for j in range(steps):
                w = quiet(p.warm, xs[j + 1])
                (r.warm1 if j == 0 else r.loop).append(w)
                r.du0 = max(r.du0, float(np.max(np.abs(w.u0 - u_ref[j]))))
                r.dcost_warm = max(r.dcost_warm, abs(w.cost - cost_ref[j]) / abs(cost_ref[j]))
    return recs, dropped


def print_tables(N: int, recs: dict[str, Record], log) -> None:
    sh = recs["shooting"]
    sh_cold = med([c.solve for c in sh.cold])
    sh_cost = sh.cold[0].cost
    log(f"\nCold solve from hanging, N = {N} (times in ms; x = median / shooting's median)")
    hdr = (f"  {'peer':<14}{'build':>9}{'1st':>9}{'best':>9}{'median':>9}{'ipopt':>9}{'iters':>6}"
           f"{'cost':>16}{'rel.dev':>10}{'x':>7}")
    log(hdr)
    log("  " + "-" * (len(hdr) - 2))
    for r in recs.values():
        c = r.cold
        costs = [x.cost for x in c]
        dev = max(abs(x - sh_cost) for x in costs) / abs(sh_cost)
        flag = "" if dev <= REL_COST_TOL or "colloc" in r.name else "  <-- DISAGREES"
        fails = sum(not x.success for x in c)
        fl = f"  ({fails} failed: {c[0].status})" if fails else ""
        log(f"  {r.name:<14}{ms(r.build):>9}{ms(r.first.step):>9}{ms(best([x.solve for x in c])):>9}"
            f"{ms(med([x.solve for x in c])):>9}{ms(med([x.ipopt for x in c])):>9}{c[0].iterations:>6}"
            f"{costs[0]:>16.6f}{dev:>10.1e}{med([x.solve for x in c]) / sh_cold:>7.2f}{flag}{fl}")

    log("  build: solver construction (Opti: + a priming solve of its warm instance; rockit: + transcription and a "
        "priming solve of both instances); 1st: the first cold call after build, with any lazy setup and set_initial; "
        "best/median: the solver call; ipopt: IPOPT's t_wall_total (median)")

    sh_loop = med([w.step for w in sh.warm1 + sh.loop])
    log(f"\nWarm MPC step, N = {N} (ms): first warm step after the cold solve (x_1), then the closed loop "
        f"(x = loop step median / shooting's)")
    hdr = (f"  {'peer':<14}{'solve':>8}{'step':>8}{'ipopt':>8}{'iters':>6} |{'solve':>8}{'step':>8}"
           f"{'ipopt':>8}{'iters':>6}{'max|du0|':>10}{'cost dev':>10}{'x':>7}")
    log(f"  {'':<14}{'---- first warm step (median) ----':^30} |{'--- closed loop, all warm steps (median) ---':^48}")
    log(hdr)
    log("  " + "-" * (len(hdr) - 2))
    for r in recs.values():
        w1, lp = r.warm1, r.warm1 + r.loop
        fails = sum(not x.success for x in lp)
        fl = f"  ({fails} failed)" if fails else ""
        note = "" if "colloc" in r.name or r.du0 < 1e-3 else "  <-- u0 differs"
        log(f"  {r.name:<14}{ms(med([x.solve for x in w1])):>8}{ms(med([x.step for x in w1])):>8}"
            f"{ms(med([x.ipopt for x in w1])):>8}{int(med([x.iterations for x in w1])):>6} |"
            f"{ms(med([x.solve for x in lp])):>8}{ms(med([x.step for x in lp])):>8}{ms(med([x.ipopt for x in lp])):>8}"
            f"{med([x.iterations for x in lp]):>6.0f}{r.du0:>10.1e}{r.dcost_warm:>10.1e}"
            f"{med([x.step for x in lp]) / sh_loop:>7.2f}{note}{fl}")
    log("  solve: the solver call; step: + the warm-start bookkeeping (shift, set_value/set_initial, reading the "
        "solution); max|du0| [N] and cost dev (relative): against shooting's solve at the same plant state")


def shooting_variants(model: shooting.Model, N: int, reps: int, log) -> dict[str, tuple[float, float, bool]]:
    """Cold and warm times of shooting under options that could close the gap to acados (information only).

    Returns {variant: (median cold solve s, cost, same optimum and converged)}.
    """
    out: dict[str, tuple[float, float, bool]] = {}
    prob = problem_of(model, N)
    plant = plant_of(prob)
    variants = {
        "default": ShootingPeer(prob),
        "gauss-newton": ShootingPeer(prob, hessian="gauss-newton"),
        "jit": ShootingPeer(prob, jit=True),
        "jit+gauss-newton": ShootingPeer(prob, jit=True, hessian="gauss-newton"),
        "mu adaptive": ShootingPeer(prob, solver_options={"ipopt.mu_strategy": "adaptive"}),
        "fatrop": ShootingPeer(prob, solver="fatrop"),
        "fatrop+jit": ShootingPeer(prob, solver="fatrop", jit=True),
    }
    log(f"\nshooting variants, N = {N} (ms, median of {reps}; information, not a target)")
    hdr = (f"  {'variant':<18}{'build':>10}{'cold':>9}{'best':>9}{'ipopt':>9}{'iters':>6}{'cost':>16}"
           f"{'warm':>9}{'iters':>6}")
    log(hdr)
    log("  " + "-" * (len(hdr) - 2))
    for name, p in variants.items():
        t = time.perf_counter()
        try:
            quiet(p.build)
            build = time.perf_counter() - t
            cold, warm = [], []
            for _ in range(reps):
                c = p.cold(prob.x0)
                cold.append(c)
                if hasattr(p, "warm"):
                    x1 = plant(prob.x0, c.u0)
                    warm.append(p.warm(x1))
        except Exception as e:  # noqa: BLE001 - e.g. no C compiler for jit, fatrop's structure detection
            log(f"  {name:<18}skipped: {type(e).__name__}: {str(e).strip().splitlines()[-1][:100]}")
            continue
        wt = ms(med([w.solve for w in warm])) if warm else "-"
        wi = warm[0].iterations if warm else "-"
        ref_cost = out.get("default", (0, cold[0].cost))[1]
        other = abs(cold[0].cost - ref_cost) > REL_COST_TOL * abs(ref_cost)
        flag = "  <-- another local minimum" if other else ("" if cold[0].success else f"  ({cold[0].status})")
        out[name] = (med([c.solve for c in cold]), cold[0].cost, not other and cold[0].success)
        log(f"  {name:<18}{ms(build):>10}{ms(med([c.solve for c in cold])):>9}{ms(best([c.solve for c in cold])):>9}"
            f"{ms(med([c.ipopt for c in cold])):>9}{cold[0].iterations:>6}{cold[0].cost:>16.6f}{wt:>9}{wi:>6}{flag}")
    log("  fatrop: MultipleShootingOCP(..., solver='fatrop'), CasADi's structure-exploiting interior point "
        "on the same NLP")
    log("  jit: the NLP functions compiled with gcc -O1 at build (the build column is mostly the compiler)")
    return out


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def header(horizons: list[int], reps: int, steps: int, log) -> None:
    opts = {**peers_mod.DEFAULT_IPOPT_OPTIONS}
    log("MPC benchmark: acados' cart-pole swing-up, multiple shooting, RK4 x 1 substep, IPOPT")
    log(f"  N = {horizons}, dt = {DT}, x0 = [0, pi, 0, 0] (hanging), x_ref = 0, u_ref = 0")
    diag = lambda W: "diag(" + ", ".join(f"{v:g}" for v in np.diag(W)) + ")"  # noqa: E731
    log(f"  cost = sum_(k<N) x_k' Q x_k + u_k' R u_k + x_N' Q_terminal x_N; Q = {diag(Q)}, R = {diag(R)}, "
        f"Q_terminal = {diag(Q_TERMINAL)}")
    log("  bounds: |F| <= 80 on u_0..u_(N-1), |p| <= 2 on x_1..x_N; plant: RK4 with 10 substeps per dt")
    log(f"  IPOPT options (all peers, from shooting.mpc.solvers): {opts} + record_time; warm solvers add "
        f"shooting.mpc.solvers.WARM_START_OPTIONS (not do-mpc: its own single solver)")
    log(f"  {COMPILED}: compile_nlp=True on a private cache, empty at the start, then a second process on it")
    st = peers_mod.peer_status()
    vers = ", ".join(f"{peers_mod.PEER_PACKAGES[m]} {v or 'missing'}" for m, v in st.items())
    log(f"  python {platform.python_version()}, casadi {ca.__version__}, numpy {np.__version__}, {vers}")
    log(f"  {reps} repetitions x (1 cold + {steps} warm steps), peers interleaved; load average at start "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if not all(st.values()):
        log(f"  missing peers are skipped; install them with: {peers_mod.INSTALL_HINT}")


@contextlib.contextmanager
def private_cache(folder: Path):
    """``SHOOTING_CACHE_DIR`` = `folder` (never the user's cache) and ``SHOOTING_COMPILE_NLP`` unset (every peer
    as labelled) in this process and its children; both restored on exit."""
    saved = {k: os.environ.get(k) for k in (CACHE_DIR_ENV, COMPILE_ENV)}
    os.environ[CACHE_DIR_ENV] = str(folder)
    os.environ.pop(COMPILE_ENV, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cached_run(args: argparse.Namespace, which: list[int], cwd: str, log) -> dict[str, dict[str, dict]]:
    """The benchmark of models `which` (indices into --models) in a second process on this process's cache:
    {index: {N: {peer: summary}}} (JSON keys: strings)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--cached-run", ",".join(map(str, which)),
           "--reps", str(args.reps), "--steps", str(args.steps)] + (["--quick"] if args.quick else []) + (
        ["--models", args.models] if args.models else [])
    log(f"\n(second process on the same cache: {' '.join(cmd[1:])})")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=cwd)  # cwd: relative model files
    if proc.returncode != 0:
        raise RuntimeError(f"the cached run failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if np.isfinite(a) and np.isfinite(b) and b > 0 else "-"


def print_first_and_cached(models: list[shooting.Model], first: dict[int, dict], cached: dict[str, dict],
                           why_not: dict[int, str], log) -> None:
    """Build, cold and warm solve per model, horizon and peer, first run and cached run side by side, with the
    ratios to Opti; a skip row for a model without a cached run (`why_not`)."""
    log("\nFirst run (empty cache) and cached run (a new process) (ms; x Opti = / Opti's in the same process; "
        "warm = closed-loop median)")
    lead = f"{'':<{NAME_WIDTH}}{'':>4}  {'':<14}"
    log(f"{lead}{'----------- first run -----------':^39} |{'----------- cached run -----------':^39}")
    cols = f"{'build':>9}{'cold':>8}{'x Opti':>7}{'warm':>8}{'x Opti':>7}"
    hdr = f"{'model':<{NAME_WIDTH}}{'N':>4}  {'peer':<14}{cols} |{cols}  cache"
    log(hdr)
    log("-" * len(hdr))
    for i, model in enumerate(models):
        if str(i) not in cached:
            log(skip_row(model.name, why_not.get(i) or f"{COMPILED} did not run"))
            continue
        for N, recs in first[i].items():
            runs = ({n: r.summary() for n, r in recs.items()}, cached[str(i)].get(str(N), {}))
            for name in recs:
                row = f"{model.name:<{NAME_WIDTH}}{N:>4}  {name:<14}"
                for run in runs:
                    s, o = run.get(name), run.get("Opti", {})
                    if s is None:
                        row += f"{'-':>39} |"
                        continue
                    row += (f"{ms(s['build']):>9}{ms(s['cold']):>8}{ratio(s['cold'], o.get('cold', np.nan)):>7}"
                            f"{ms(s['warm']):>8}{ratio(s['warm'], o.get('warm', np.nan)):>7} |")
                caches = [run[name]["cache"] for run in runs if name in run and run[name]["cache"]]
                log(row[:-2] + ("  " + " -> ".join(caches) if caches else ""))
    log(f"  {COMPILED}: compile_nlp=True (built: C generated and compiled by this process; hit: loaded from the "
        f"cache; fallback: not compiled); shooting: the default (CasADi's SX functions, nothing cached); "
        f"--quick's cached run has shooting, {COMPILED} and Opti only")


def cache_targets(models: list[shooting.Model], first: dict[int, dict], cached: dict[str, dict], log) -> None:
    """The cold target against Opti on the cached run, and the cached run's optimum against the first run's."""
    log("\nTargets (cached run):")
    for i, model in enumerate(models):
        for N, again in ((int(N), v) for N, v in cached.get(str(i), {}).items()):
            if COMPILED in again and "Opti" in again:
                a, b = again[COMPILED]["cold"], again["Opti"]["cold"]
                log(f"  {verdict(a <= 0.5 * b)}  {model.name} N = {N}: {COMPILED} cold <= 0.5 x Opti cold (cached "
                    f"run, a new process): {ms(a)} vs {ms(b)} ms (ratio {ratio(a, b)})")
            ref = first[i][N]["shooting"].cold[0].cost
            bad = [n for n, v in again.items() if abs(v["cost"] - ref) > REL_COST_TOL * abs(ref)]
            log(f"  {verdict(not bad)}  {model.name} N = {N}: the cached run's peers reach the first run's optimal "
                f"cost to {REL_COST_TOL:g} relative" + (f": disagree: {', '.join(bad)}" if bad else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"N = 20, 2 repetitions, main peers only, {COMPILED} only on NLPs of at most "
                         f"{QUICK_COMPILE_INSTRUCTIONS} SX instructions (smoke test)")
    ap.add_argument("--reps", type=int, help="repetitions (default 2 quick, 5 full)")
    ap.add_argument("--steps", type=int, help="closed-loop warm steps per repetition (default 3 quick, 20 full)")
    ap.add_argument("--cached-run", metavar="INDICES", help=argparse.SUPPRESS)  # the second process
    add_models_option(ap, default="cartpole")
    args = ap.parse_args(argv)
    args.reps = args.reps or (2 if args.quick else 5)
    args.steps = args.steps or (3 if args.quick else 20)
    horizons = [20] if args.quick else [40, 20]
    models = selected_models(ap, args)
    if args.cached_run is not None and not os.environ.get(CACHE_DIR_ENV):
        ap.error("--cached-run is the benchmark's own second process: it runs on the first one's private cache")

    def log(s: str = "") -> None:
        if args.cached_run is None:
            print(s, flush=True)

    header(horizons, args.reps, args.steps, log)
    cwd = os.getcwd()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_mpc_") as tmp, contextlib.ExitStack() as stack:
        if args.cached_run is None:  # an empty cache of our own: never the user's
            stack.enter_context(private_cache(Path(tmp) / "cache"))
        os.chdir(tmp)  # IPOPT / do-mpc / rockit / gcc must not write into the caller's folder
        stack.callback(os.chdir, cwd)
        if args.cached_run is not None:
            which = [int(i) for i in args.cached_run.split(",")]
            only = {"shooting", COMPILED, "Opti"} if args.quick else None
            out = {i: {N: {n: r.summary() for n, r in run_horizon(models[i], N, args.reps, args.steps, False, log,
                                                                     only=only)[0].items()} for N in horizons}
                   for i in which}
            print(json.dumps(out))
            return 0
        first: dict[int, dict[int, dict[str, Record]]] = {}
        why_not: dict[int, str] = {}
        for i, model in enumerate(models):
            first[i], why_not[i] = bench_model(model, horizons, args.reps, args.steps, args.quick, log)
        which = [i for i in first if any(COMPILED in recs for recs in first[i].values())]
        cached = cached_run(args, which, cwd, log) if which else {}
        print_first_and_cached(models, first, cached, why_not, log)
        if cached:
            cache_targets(models, first, cached, log)
    log(f"\ntotal {time.perf_counter() - t_start:.1f} s; load average at end {os.getloadavg()[0]:.2f}")
    return 0


def bench_model(model: shooting.Model, horizons: list[int], reps: int, steps: int, quick: bool,
                log) -> tuple[dict[int, dict[str, Record]], str]:
    """Run and print every table of one model (the first run), then its targets.

    Returns ({N: {peer: Record}}, why shooting (C) did not run, or "").
    """
    variants = not quick
    results: dict[int, dict[str, Record]] = {}
    t_start = time.perf_counter()
    why_not = ""
    for N in horizons:
        log(f"\n=== {model.name}, N = {N} ===")
        results[N], dropped = run_horizon(model, N, reps, steps, variants, log,
                                          compile_budget=QUICK_COMPILE_INSTRUCTIONS if quick else None)
        why_not = why_not or dropped.get(COMPILED, "")
        print_tables(N, results[N], log)
        if not quick:
            log("")
            for r in results[N].values():
                log(f"  {r.name:<14}{r.peer.note}")
    if model.nz:
        why_not = (f"model {model.name} has algebraic states: shooting alone (this benchmark's peers state ODEs), "
                   f"no {COMPILED} or Opti to compare with")
    variant_results = {N: shooting_variants(model, N, reps, log) for N in horizons} if variants else {}
    gc.collect()  # the jit variants' solvers (in reference cycles) delete their files while the folder is there
    bad = model_targets(model, results, variant_results, log)
    r20 = results[20]
    peers = ", ".join(n for n in r20 if n != "shooting") or "none"
    log(f"\n{model.name:<{NAME_WIDTH}} N = 20: shooting cold {ms(med([c.solve for c in r20['shooting'].cold]))} ms, "
        f"warm step {ms(med([w.solve for w in r20['shooting'].warm1]))} ms; peers {peers}"
        f"{'; disagree: ' + ', '.join(bad) if bad else ''}; total {time.perf_counter() - t_start:.1f} s; "
        f"load average at end {os.getloadavg()[0]:.2f}")
    return results, why_not


def model_targets(model: shooting.Model, results: dict[int, dict[str, Record]], variant_results: dict,
                  log) -> list[str]:
    """Print the first run's targets of one model (the cold one against Opti: on the cached run, `cache_targets`);
    return the peers and horizons whose cold optimum disagrees with shooting's."""
    acados = model.name == "cartpole"  # the project owner's acados figures are the cart-pole's
    r20 = results[20]
    sh20 = med([c.solve for c in r20["shooting"].cold])
    if acados:
        log("\nReference (project owner, this machine): acados SQP (Gauss-Newton, HPIPM), N = 20 cold: ~2.2 ms; "
            "RTI step ~80 us")
        log(f"shooting N = 20 cold: {ms(sh20)} ms = {sh20 / ACADOS_COLD_N20:.1f} x acados SQP; "
            f"warm step {ms(med([w.solve for w in r20['shooting'].warm1]))} ms = "
            f"{med([w.solve for w in r20['shooting'].warm1]) / ACADOS_RTI:.0f} x acados RTI")

    log(f"\nTargets ({model.name}, first run):")
    for N, recs in results.items():
        sh = recs["shooting"]
        if "Opti" in recs:
            b = med([c.solve for c in recs["Opti"].cold])
            cold = {n: med([c.solve for c in recs[n].cold]) for n in ("shooting", COMPILED) if n in recs}
            log(f"        N = {N}: cold against Opti's {ms(b)} ms, first run: "
                + ", ".join(f"{n} {ms(a)} ms (ratio {ratio(a, b)})" for n, a in cold.items())
                + f" (information: the target is {COMPILED}'s on the cached run)")
        for metric in ("step", "solve"):
            sh_w = med([getattr(w, metric) for w in sh.warm1 + sh.loop])
            others = {n: med([getattr(w, metric) for w in r.warm1 + r.loop]) for n, r in recs.items()
                      if not n.startswith("shooting")}
            if not others:  # shooting alone (a DAE): nothing to compare
                continue
            slower = [n for n, v in others.items() if not sh_w < v]
            what = "whole MPC step" if metric == "step" else "solver call only"
            fastest = min(others, key=others.get) if others else None
            log(f"  {verdict(not slower)}  N = {N}: shooting warm MPC step faster than every peer ({what}, "
                f"closed-loop median): {ms(sh_w)} ms; fastest peer {fastest} {ms(others.get(fastest, float('nan')))} ms"
                + (f"; not faster than: {', '.join(slower)}" if slower else ""))
    if acados:
        log(f"  {verdict(sh20 <= 3 * ACADOS_COLD_N20)}  shooting N = 20 cold within 3 x 2.2 ms: {ms(sh20)} ms "
            f"(limit {ms(3 * ACADOS_COLD_N20)} ms)")
    ok20 = {n: v for n, v in variant_results.get(20, {}).items() if v[2]}
    if ok20 and acados:
        n_best = min(ok20, key=lambda n: ok20[n][0])
        log(f"        (fastest shooting variant at N = 20 with the same optimum: {n_best}, {ms(ok20[n_best][0])} ms "
            f"= {ok20[n_best][0] / ACADOS_COLD_N20:.1f} x acados)")
    bad = [f"N={N} {n}" for N, rs in results.items() for n, r in rs.items()
           if "colloc" not in n and abs(r.cold[0].cost - rs["shooting"].cold[0].cost) > REL_COST_TOL * abs(
               rs["shooting"].cold[0].cost)]
    log(f"  {verdict(not bad)}  all peers agree on the cold optimal cost to {REL_COST_TOL:g} relative"
        + (f": disagree: {', '.join(bad)}" if bad else ""))
    return bad


if __name__ == "__main__":
    raise SystemExit(main())
