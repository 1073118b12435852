"""Write tests/unit/reference_values.json: independent high-precision reference values.

Run:  .venv/bin/python tests/unit/make_reference_values.py

Every number is computed with mpmath at 50 significant digits directly from the
formulas of the papers, without any code from ``models``:

* ``R^i(x)``: ``mpmath.gammainc(i+1, 0, x, regularized=True)``;
* ``V``, ``psi``, ``w``: the *untruncated* sums of Theorem 1 / Lemma 4 of paper 004
  (all ``floor(iota/beta) + 1`` terms), with ``nu = gamma e^{-alpha beta}`` and
  ``Delta = alpha + gamma - nu`` evaluated in 50-digit arithmetic, so the cancellation
  between the two sums of V costs nothing at this precision;
* ``time_to_value``: ``mpmath.findroot`` (Anderson/bisection on the 50-digit V);
* paper 003's optimal ratio: ``findroot`` of ``e^r (1 - z) - (1 + r)``;
* Greedy: ``mu/Delta R^1(Delta tau)``.

The parameters are fixed below (no randomness) and cover the limits:
alpha -> 0, nu -> 0 (beta large), lam -> 1, tau -> 0, many terms (tau/beta ~ 400).
"""

from __future__ import annotations

import json
from pathlib import Path

import mpmath as mp

mp.mp.dps = 50
OUT = Path(__file__).with_name("reference_values.json")


def exact(text: str) -> mp.mpf:
    """The float64 nearest to ``text``, exactly, as the code under test sees it."""
    return mp.mpf(float(text))


def big_r(i: int, x: mp.mpf) -> mp.mpf:
    return mp.gammainc(i + 1, 0, x, regularized=True)


def sums(iota: str, alpha: str, beta: str, gamma: str) -> tuple[mp.mpf, mp.mpf, mp.mpf]:
    """(V/mu, psi, w) of Theorem 1 / Lemma 4, untruncated, 50 digits."""
    return sums_mp(exact(iota), exact(alpha), exact(beta), exact(gamma))


def sums_mp(io: mp.mpf, a: mp.mpf, b: mp.mpf, g: mp.mpf) -> tuple[mp.mpf, mp.mpf, mp.mpf]:
    """(V/mu, psi, w) at 50-digit arguments."""
    b_inf = b == mp.inf
    nu = mp.mpf(0) if b_inf else g * mp.exp(-a * b)
    delta_plus_nu = a + g
    n = 0 if b_inf else int(mp.floor(io / b))
    v = mp.mpf(0)
    p = mp.mpf(0)
    ww = mp.mpf(0)
    for i in range(n + 1):
        s = io - i * b if i else io
        a_term = nu**i / delta_plus_nu ** (i + 1) * big_r(i, delta_plus_nu * s)
        psi_term = big_r(i, g * s) / g
        v += a_term - mp.exp(-a * io) * psi_term
        p += psi_term
        ww += a_term
    return v, p, ww


# (tau_eff, alpha, beta, gamma): decimal strings, exactly representable intent
CASES = [
    ("1", "0.5", "2", "0.7"),
    ("10", "0.5", "2", "0.7"),
    ("0.001", "0.5", "2", "0.7"),
    ("1e-9", "0.3", "0.5", "1.2"),
    ("5", "0.2", "inf", "0.4"),  # Greedy-CIS (nu = 0)
    ("50", "0.2", "inf", "0.4"),
    ("3", "1e-9", "inf", "0.8"),  # lam -> 1 and nu = 0
    ("20", "1e-10", "1e8", "0.5"),  # alpha -> 0, one term
    ("20", "1e-6", "3000", "0.5"),  # alpha -> 0
    ("7", "0.05", "0.05", "0.35"),  # many terms: tau/beta = 140
    ("20", "0.9", "0.05", "0.2"),  # 400 terms
    ("12", "0.01", "1e4", "2.5"),  # nu tiny (beta huge)
    ("4", "2.0", "0.3", "0.01"),  # gamma small
    ("100", "0.05", "1.5", "0.4"),
    ("0.25", "3.0", "0.01", "5.0"),
    ("15", "0.002", "0.8", "0.3"),  # small alpha with many terms
]

GREEDY = [("0.001", "0.7"), ("1", "0.7"), ("30", "0.7"), ("1e-8", "2.0"), ("1", "1e-9")]

TIME_TO_VALUE = [  # (level as a fraction of mu/Delta, alpha, beta, gamma)
    ("0.5", "0.5", "2", "0.7"),
    ("1e-6", "0.5", "2", "0.7"),
    ("0.9", "0.05", "0.05", "0.35"),
    ("0.3", "0.2", "inf", "0.4"),
    ("0.999", "0.9", "0.05", "0.2"),
]

RESIDUALS = [(0, "1e-10"), (0, "3"), (1, "1e-8"), (3, "0.5"), (10, "10"), (25, "40")]

RATIOS = [("24", "1", "1"), ("24", "1", "4"), ("24", "4", "1"), ("1000", "1", "1"), ("2", "1", "1")]


def main() -> None:
    out: dict[str, list[dict[str, str]]] = {
        "values": [],
        "greedy": [],
        "time_to_value": [],
        "residual": [],
        "optimal_ratio": [],
    }
    for io, a, b, g in CASES:
        v, p, ww = sums(io, a, b, g)
        out["values"].append(
            {
                "tau": io,
                "alpha": a,
                "beta": b,
                "gamma": g,
                "V": mp.nstr(v, 25),
                "psi": mp.nstr(p, 25),
                "w": mp.nstr(ww, 25),
            }
        )
    for t, d in GREEDY:
        x = exact(d) * exact(t)
        out["greedy"].append({"tau": t, "delta": d, "V": mp.nstr(big_r(1, x) / exact(d), 25)})
    for frac, a, b, g in TIME_TO_VALUE:
        am, bm, gm = exact(a), exact(b), exact(g)
        nu = mp.mpf(0) if bm == mp.inf else gm * mp.exp(-am * bm)
        level = exact(mp.nstr(mp.mpf(frac) / (am + gm - nu), 30))

        def v_at(t: mp.mpf, am: mp.mpf = am, bm: mp.mpf = bm, gm: mp.mpf = gm) -> mp.mpf:
            return sums_mp(t, am, bm, gm)[0]

        lo, hi = mp.mpf(0), mp.mpf(1)
        while v_at(hi) < level:
            lo, hi = hi, 2 * hi
        for _ in range(130):  # plain bisection: 2^-130 of the bracket, below 1e-35
            mid = (lo + hi) / 2
            if v_at(mid) < level:
                lo = mid
            else:
                hi = mid
        root = (lo + hi) / 2
        out["time_to_value"].append(
            {
                "level": mp.nstr(level, 25),
                "alpha": a,
                "beta": b,
                "gamma": g,
                "tau": mp.nstr(root, 25),
            }
        )
    for i, x in RESIDUALS:
        out["residual"].append({"i": str(i), "x": x, "R": mp.nstr(big_r(i, mp.mpf(x)), 25)})
    for period, cc, cs in RATIOS:
        z = mp.mpf(cc) / (mp.mpf(cs) * mp.mpf(period))
        if z >= 1:
            r = "none"
        else:
            r = mp.nstr(
                mp.findroot(lambda r, z=z: mp.exp(r) * (1 - z) - (1 + r), mp.sqrt(2 * z) + z), 25
            )
        out["optimal_ratio"].append({"period": period, "cc": cc, "cs": cs, "r": r})
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
