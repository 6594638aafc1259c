"""do-mpc's industrial emulsion polymerisation reactor (its examples/industrial_poly), re-typed from the published
equations: masses of water, monomer and product in kg (1e4), temperatures in K (300), the accumulated monomer feed
(1e4 kg) and the adiabatic temperature; the monomer feed in kg/h (up to 3e4) and two coolant inlet temperatures. An
economic cost (maximise the product: -m_P at every stage and the end) with do-mpc's rate penalty and hard bounds;
the reaction enthalpy and rate constant are parameters (do-mpc's uncertain ones) at their nominal values. Time in
hours. A badly scaled plant: states from 1e1 to 1e4, the feed's bound 3e4, its step's sensitivities across 1e-8..1e3."""

from __future__ import annotations

import casadi as ca
import numpy as np

import shooting

R_GAS, T_F, E_A, A_TANK = 8.314, 25 + 273.15, 8500.0, 65.0
K_U2, K_U1, W_WF, W_AF = 32.0, 4.0, 0.333, 0.667
M_M_KW, FM_M_KW, M_AWT_KW, FM_AWT_KW, M_AWT, FM_AWT, M_S = 5000.0, 3e5, 1000.0, 1e5, 200.0, 20000.0, 39000.0
C_PW, C_PS, C_PF, C_PR = 4.2, 0.47, 3.0, 5.0
K_WS, K_AS, K_PS, ALFA = 17280.0, 3600.0, 360.0, 5 * 20e4 * 3.6
DT = 50.0 / 3600.0
X0 = [10000.0, 853.0, 26.5, 363.15, 363.15, 363.15, 308.15, 308.15, 300.0,
      853.0 * 950.0 / ((10000.0 + 853.0 + 26.5) * 5.0) + 363.15]


def make_model(grams: bool = False) -> shooting.Model:
    """The reactor in kg and kg/h, or (`grams`) its kin in g and g/h: the same plant, 1000 times worse scaled."""
    g = 1000.0 if grams else 1.0
    x = ca.SX.sym("x", 10)
    u = ca.SX.sym("u", 3)
    p = ca.SX.sym("p", 2)
    m_W, m_A, m_P = x[0] / g, x[1] / g, x[2] / g
    T_R, T_S, Tout_M, T_EK, Tout_AWT = (x[i] for i in range(3, 8))
    m_dot_f, T_in_M, T_in_EK = u[0] / g, u[1], u[2]
    delH_R, k_0 = p[0], p[1]
    U_m = m_P / (m_A + m_P)
    m_ges = m_W + m_A + m_P
    k_R1 = k_0 * ca.exp(-E_A / (R_GAS * T_R)) * (K_U1 * (1 - U_m) + K_U2 * U_m)
    k_R2 = k_0 * ca.exp(-E_A / (R_GAS * T_EK)) * (K_U1 * (1 - U_m) + K_U2 * U_m)
    k_K = (m_W / m_ges) * K_WS + (m_A / m_ges) * K_AS + (m_P / m_ges) * K_PS
    reaction = k_R1 * (m_A - m_A * M_AWT / m_ges)
    exchanger = k_R2 * (m_A / m_ges) * M_AWT
    dm_W = m_dot_f * W_WF
    dm_A = m_dot_f * W_AF - reaction - exchanger
    dm_P = reaction + exchanger
    dT_R = 1.0 / (C_PR * m_ges) * (m_dot_f * C_PF * (T_F - T_R) - k_K * A_TANK * (T_R - T_S)
                                   - FM_AWT * C_PR * (T_R - T_EK) + delH_R * reaction)
    xdot = ca.vertcat(
        g * dm_W, g * dm_A, g * dm_P, dT_R,
        1.0 / (C_PS * M_S) * (k_K * A_TANK * (T_R - T_S) - k_K * A_TANK * (T_S - Tout_M)),
        1.0 / (C_PW * M_M_KW) * (FM_M_KW * C_PW * (T_in_M - Tout_M) + k_K * A_TANK * (T_S - Tout_M)),
        1.0 / (C_PR * M_AWT) * (FM_AWT * C_PR * (T_R - T_EK) - ALFA * (T_EK - Tout_AWT) + exchanger * delH_R),
        1.0 / (C_PW * M_AWT_KW) * (FM_AWT_KW * C_PW * (T_in_EK - Tout_AWT) - ALFA * (Tout_AWT - T_EK)),
        g * m_dot_f,
        delH_R / (m_ges * C_PR) * dm_A - (dm_A + dm_W + dm_P) * (m_A * delH_R / (m_ges * m_ges * C_PR)) + dT_R)
    mass, flow = ("g", "g/h") if grams else ("kg", "kg/h")
    return shooting.Model(
        "poly_reactor", x, u, xdot, p,
        state_names=["m_W", "m_A", "m_P", "T_R", "T_S", "Tout_M", "T_EK", "Tout_AWT", "accum_monom", "T_adiab"],
        input_names=["m_dot_f", "T_in_M", "T_in_EK"], param_names=["delH_R", "k_0"], p0=[950.0, 7.0],
        x0=np.array(X0) * masses_g(g), u0=[0.0, 363.15, 363.15], u_min=[0.0, 333.15, 333.15],
        u_max=[3e4 * g, 373.15, 373.15], dt=DT,
        state_units=[mass, mass, mass, "K", "K", "K", "K", "K", mass, "K"], input_units=[flow, "K", "K"])


def masses_g(g: float) -> np.ndarray:
    """What each state is multiplied by in units `g` times smaller (the masses and the accumulated feed)."""
    return np.array([g, g, g, 1, 1, 1, 1, 1, g, 1])


def make_ocp(model: shooting.Model, horizon: int = 20, grams: bool = False,
             **options: object) -> shooting.MultipleShootingOCP:
    """do-mpc's template_mpc (without its robust scenarios): `horizon` steps of 50 s (RK4 in 30 substeps: the heat
    exchanger's pole at -4557 1/h needs h |lambda| < 2.8), cost -m_P (in kg) at every stage and the end, its rate
    penalty, its bounds (T_R within 2 K of 363.15 K, T_adiab <= 382.15 K), hard as do-mpc declares them; `grams`:
    for `make_model(grams=True)`, the same problem in g and g/h."""
    inf = np.inf
    g = 1000.0 if grams else 1.0
    mass = masses_g(g)
    return shooting.MultipleShootingOCP(
        model, horizon, dt=DT, method="rk4", steps=30, Q=np.zeros((10, 10)), R=np.zeros(3),
        R_delta=[0.002 / g**2, 0.004, 0.002],
        x_min=np.array([0.0, 0.0, 26.0, 361.15, 298.0, 298.0, 288.0, 288.0, 0.0, -inf]) * mass,
        x_max=np.array([inf, inf, inf, 365.15, 400.0, 400.0, 400.0, 400.0, 30000.0, 382.15]) * mass,
        stage_cost=lambda x, u, p: -x[2] / g, terminal_cost=lambda x, p: -x[2] / g, **options)
