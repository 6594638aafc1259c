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
In full mode a last table times shooting variants (Gauss-Newton, jit, and
solver='fatrop') as hints, not targets.

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
    python scripts/bench_mpc.py --quick    # N = 20, 2 repetitions, main peers
    python scripts/bench_mpc.py --quick --models all   # the same over every built-in model (the tests)

With ``--models`` (default: the cart-pole above) another model's problem is
its default scenario's weights, dt, start and plant with the same RK4 x 1 and
zero references; a model with algebraic states is solved by shooting alone (the
peers here state an ODE), with a line saying so.

Peers that are not installed are skipped with a line; install them with
``pip install do-mpc rockit-meco`` (benchmark-only, not project dependencies).
All solver runs happen in a temporary directory, so nothing is written to the
current one.
"""

from __future__ import annotations

import argparse
import os
import platform
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
from bench_mpc_peers import Problem, ShootingPeer  # noqa: E402
from benchkit import add_models_option, selected_models  # noqa: E402

Q = np.diag([1e3, 1e3, 1e-2, 1e-2])
R = np.diag([1e-2])
Q_TERMINAL = Q
DT = 0.05
ACADOS_COLD_N20 = 2.2e-3  # s, project owner's measurement: SQP (Gauss-Newton, HPIPM), N = 20
ACADOS_RTI = 80e-6  # s, one RTI step
REL_COST_TOL = 1e-4


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


def run_horizon(model: shooting.Model, N: int, reps: int, steps: int, variants: bool, log) -> dict[str, Record]:
    prob = problem_of(model, N)
    plant = plant_of(prob)
    peers, skipped = peers_mod.make_peers(prob, variants=variants)
    for line in skipped:
        log(f"  SKIP {line}")

    recs: dict[str, Record] = {}
    for p in peers:
        r = Record(p)
        t = time.perf_counter()
        try:
            quiet(p.build)
        except Exception as e:  # noqa: BLE001 - a broken peer is reported, not fatal
            r.failed = f"build failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            log(f"  SKIP {p.name}: {r.failed}")
            continue
        r.build = time.perf_counter() - t
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
        log(f"  SKIP {name}: {recs.pop(name).failed}")

    for _ in range(reps):  # interleave the peers so load drift hits them alike
        for r in recs.values():
            p = r.peer
            r.cold.append(quiet(p.cold, prob.x0))
            for j in range(steps):
                w = quiet(p.warm, xs[j + 1])
                (r.warm1 if j == 0 else r.loop).append(w)
                r.du0 = max(r.du0, float(np.max(np.abs(w.u0 - u_ref[j]))))
                r.dcost_warm = max(r.dcost_warm, abs(w.cost - cost_ref[j]) / abs(cost_ref[j]))
    return recs


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 20, 2 repetitions, main peers only (smoke test)")
    ap.add_argument("--reps", type=int, help="repetitions (default 2 quick, 5 full)")
    ap.add_argument("--steps", type=int, help="closed-loop warm steps per repetition (default 3 quick, 20 full)")
    add_models_option(ap, default="cartpole")
    args = ap.parse_args(argv)
    reps = args.reps or (2 if args.quick else 5)
    steps = args.steps or (3 if args.quick else 20)
    horizons = [20] if args.quick else [40, 20]

    def log(s: str = "") -> None:
        print(s, flush=True)

    opts = {**peers_mod.DEFAULT_IPOPT_OPTIONS}
    log("MPC benchmark: acados' cart-pole swing-up, multiple shooting, RK4 x 1 substep, IPOPT")
    log(f"  N = {horizons}, dt = {DT}, x0 = [0, pi, 0, 0] (hanging), x_ref = 0, u_ref = 0")
    diag = lambda W: "diag(" + ", ".join(f"{v:g}" for v in np.diag(W)) + ")"  # noqa: E731
    log(f"  cost = sum_(k<N) x_k' Q x_k + u_k' R u_k + x_N' Q_terminal x_N; Q = {diag(Q)}, R = {diag(R)}, "
        f"Q_terminal = {diag(Q_TERMINAL)}")
    log("  bounds: |F| <= 80 on u_0..u_(N-1), |p| <= 2 on x_1..x_N; plant: RK4 with 10 substeps per dt")
    log(f"  IPOPT options (all peers, from shooting.mpc.solvers): {opts} + record_time; warm solvers add "
        f"shooting.mpc.solvers.WARM_START_OPTIONS (not do-mpc: its own single solver)")
    st = peers_mod.peer_status()
    vers = ", ".join(f"{peers_mod.PEER_PACKAGES[m]} {v or 'missing'}" for m, v in st.items())
    log(f"  python {platform.python_version()}, casadi {ca.__version__}, numpy {np.__version__}, {vers}")
    log(f"  {reps} repetitions x (1 cold + {steps} warm steps), peers interleaved; load average at start "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if not all(st.values()):
        log(f"  missing peers are skipped; install them with: {peers_mod.INSTALL_HINT}")

    for model in selected_models(ap, args):
        bench_model(model, horizons, reps, steps, args.quick, log)
    return 0


def bench_model(model: shooting.Model, horizons: list[int], reps: int, steps: int, quick: bool, log) -> None:
    """Run and print every table of one model, then its targets."""
    variants = not quick
    cwd = os.getcwd()
    results: dict[int, dict[str, Record]] = {}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_mpc_") as tmp:
        os.chdir(tmp)  # IPOPT / do-mpc / rockit must not write into the caller's folder
        try:
            for N in horizons:
                log(f"\n=== {model.name}, N = {N} ===")
                results[N] = recs = run_horizon(model, N, reps, steps, variants, log)
                print_tables(N, recs, log)
                if not quick:
                    log("")
                    for r in recs.values():
                        log(f"  {r.name:<14}{r.peer.note}")
            variant_results = {}
            if not quick:
                for N in horizons:
                    variant_results[N] = shooting_variants(model, N, reps, log)
        finally:
            os.chdir(cwd)

    # ------------------------------------------------------------------ verdicts
    acados = model.name == "cartpole"  # the project owner's acados figures are the cart-pole's
    r20 = results[20]
    sh20 = med([c.solve for c in r20["shooting"].cold])
    if acados:
        log("\nReference (project owner, this machine): acados SQP (Gauss-Newton, HPIPM), N = 20 cold: ~2.2 ms; "
            "RTI step ~80 us")
        log(f"shooting N = 20 cold: {ms(sh20)} ms = {sh20 / ACADOS_COLD_N20:.1f} x acados SQP; "
            f"warm step {ms(med([w.solve for w in r20['shooting'].warm1]))} ms = "
            f"{med([w.solve for w in r20['shooting'].warm1]) / ACADOS_RTI:.0f} x acados RTI")

    log(f"\nTargets ({model.name}):")
    for N in horizons:
        recs = results[N]
        sh = recs["shooting"]
        if "Opti" in recs:
            a, b = med([c.solve for c in sh.cold]), med([c.solve for c in recs["Opti"].cold])
            log(f"  {verdict(a <= 0.5 * b)}  N = {N}: shooting cold <= 0.5 x Opti cold: {ms(a)} vs {ms(b)} ms "
                f"(ratio {a / b:.2f})")
        for metric in ("step", "solve"):
            sh_w = med([getattr(w, metric) for w in sh.warm1 + sh.loop])
            others = {n: med([getattr(w, metric) for w in r.warm1 + r.loop]) for n, r in recs.items()
                      if n != "shooting"}
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
    peers = ", ".join(n for n in r20 if n != "shooting") or "none"
    log(f"\n{model.name:<13} N = 20: shooting cold {ms(sh20)} ms, warm step "
        f"{ms(med([w.solve for w in r20['shooting'].warm1]))} ms; peers {peers}"
        f"{'; disagree: ' + ', '.join(bad) if bad else ''}; total {time.perf_counter() - t_start:.1f} s; "
        f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
