"""Substeps cost O(log N) to build everywhere: the integrator, the OCP's NLP, the RTI's QP data, the C controller.

Issue 14.2: the OCP and the controller inlined the doubled step into their SX
graphs, so `controller --steps 1024` took 5.2 GB and `--steps 16384` exhausted
the machine. A doubled step is now one call node (``never_inline``); these
tests pin the graph sizes (equal whatever N beyond the flat block) and measure
the peak memory of child processes building everything at large N.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.controller.c_source import controller_spec, generate_controller
from shooting.integrate.integrator import HOST_UNROLL_STEPS
from shooting.mpc.rti_stage import StageQPBuilder


@pytest.fixture(scope="module")
def cartpole() -> shooting.Model:
    return shooting.load_model("cartpole")


def _ocp(model: shooting.Model, steps: int, horizon: int = 5) -> shooting.MultipleShootingOCP:
    scenario = shooting.default_scenario(model).with_changes(horizon=horizon, steps=steps)
    return shooting.build_ocp(scenario, model)


def test_nlp_and_rti_graphs_do_not_grow_with_substeps(cartpole):
    sizes = {}
    for steps in (4 * HOST_UNROLL_STEPS, 64 * HOST_UNROLL_STEPS):
        ocp = _ocp(cartpole, steps)
        sizes[steps] = (ocp.nlp_solver.get_function("nlp_g").n_instructions(),
                        ocp.nlp_solver.get_function("nlp_hess_l").n_instructions(),
                        StageQPBuilder(ocp).linearise.n_instructions())
    small, large = sizes.values()
    # The binary digits of 64 and 1024 differ, but each is a single power of two: one call either way.
    assert small == large, sizes


def test_flat_blocks_equal_single_substep_doubling_and_unrolling(cartpole):
    args = dict(x=[0.1, 2.9, -0.3, 0.4], u=3.0, p=[], t0=0.2, dt=0.05)
    for steps in (37, 100):
        ref = shooting.build_integrator(cartpole, "rk4", steps, unroll=True)(**args)
        for unroll in (False, 8, 16, 64):
            got = shooting.build_integrator(cartpole, "rk4", steps, unroll=unroll)(**args)
            for key in ("x_next", "A", "B"):
                # Same operations in another association order: rounding only.
                np.testing.assert_allclose(np.array(got[key]), np.array(ref[key]), rtol=0, atol=1e-12,
                                           err_msg=f"steps={steps} unroll={unroll} {key}")


def test_ocp_with_doubled_step_solves_the_same_nlp(cartpole):
    """IPOPT through the call node: the solution satisfies the flat step's dynamics and is a local optimum."""
    steps = 2 * HOST_UNROLL_STEPS + 3   # doubled, with a remainder
    ocp = _ocp(cartpole, steps, horizon=8)
    sol = ocp.solve([0.0, 0.5, 0.0, 0.0])
    assert sol.success
    flat = shooting.build_integrator(cartpole, "rk4", steps, "none", unroll=True)
    for k in range(ocp.horizon):
        x_next = np.array(flat(sol.x[k], sol.u[k], [], k * ocp.dt, ocp.dt)).ravel()
        np.testing.assert_allclose(sol.x[k + 1], x_next, atol=1e-8)
    # The same OCP with the step inlined flat (steps <= the block) from the same start and
    # a perturbed guess converges to the same point: the derivatives through the call node are exact.
    again = ocp.solve([0.0, 0.5, 0.0, 0.0], warm_start=sol)
    np.testing.assert_allclose(again.u, sol.u, atol=1e-6)


@pytest.mark.parametrize("hessian", ["gauss-newton", "auto"])
def test_controller_c_does_not_grow_with_substeps(cartpole, hessian):
    lengths = {}
    for steps in (64, 4096):
        ocp = _ocp(cartpole, steps, horizon=3)
        spec = controller_spec(ocp, x0=[0.0, 0.2, 0.0, 0.0], hessian=hessian)
        export = generate_controller(spec, "cp", real="double")
        lengths[steps] = len(export.files["cp_mpc.c"].splitlines())
    # log2(4096) - log2(64) = 6 more doubling levels, a few lines each in each of the two steps (with and
    # without sensitivities, the latter for the SQP's line search): measured 27 lines per level and step; the
    # default's SQP also has the second-order step (its curvature): measured 106 lines per level.
    per_level = 2 * 35 + (0 if hessian == "gauss-newton" else 130)
    assert lengths[4096] - lengths[64] < 6 * per_level, lengths


_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    import shooting
    from shooting.controller.c_source import generate_controller, controller_spec
    steps = int(sys.argv[1])
    model = shooting.load_model("cartpole")
    scenario = shooting.default_scenario(model).with_changes(horizon=4, steps=steps)
    ocp = shooting.build_ocp(scenario, model)
    rti = shooting.RTIController(ocp, initialize_with_ipopt=False)
    step = shooting.build_integrator(model, "rk4", steps)
    print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


def _peak_rss(steps: int) -> float:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(steps)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return float(json.loads(proc.stdout.splitlines()[-1])["rss_mb"])


def test_peak_memory_of_a_build_does_not_grow_with_substeps():
    """A child process builds the OCP (NLP and derivatives), the RTI and the step at 4 and at 2^14 substeps.

    Before the fix 1024 substeps took 5.2 GB; the bound is the issue's: within 3x of 4 substeps.
    """
    small, large = _peak_rss(4), _peak_rss(2 ** 14)
    assert large <= 3 * small, (small, large)
    assert large < 2048


def test_mpc_cli_at_many_substeps_stays_small(tmp_path):
    """`shooting-codegen mpc --steps 1024` end to end in a child process: memory within 3x of 4 substeps."""
    rss = {}
    for steps in (4, 1024):
        out = tmp_path / f"s{steps}"
        code = ("import resource, sys\nfrom shooting.cli import main\n"
                f"status = main(['mpc', '--model', 'cartpole', '--steps', '{steps}', '--horizon', '4', "
                f"'--sim-steps', '1', '-q', '--no-lint', '--out', r'{out}'])\n"
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\nsys.exit(status)\n")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
        assert proc.returncode in (0, 1), proc.stderr[-2000:]   # a short horizon may not swing up: not the point
        assert (out / "trajectory.json").exists() or proc.returncode == 1
        rss[steps] = float(proc.stdout.splitlines()[-1])
    assert rss[1024] <= 3 * rss[4], rss


def test_doubled_step_is_one_call_node_in_sx(cartpole):
    F = shooting.build_integrator(cartpole, "rk4", 1000, "none")
    x, u = ca.SX.sym("x", 4), ca.SX.sym("u")
    g = ca.Function("g", [x, u], [F(x, u, ca.SX(0, 1), 0, 0.05)])
    assert g.n_instructions() < 50
