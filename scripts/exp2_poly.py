"""Minimax polynomials of 2^r on [-1/2, 1/2] for the relative error, by Remez exchange: the
coefficients of ``normlab.losses.online.poly_exp2``.

    python scripts/exp2_poly.py [--degrees 3,5]

Prints each degree's coefficients rounded to fp32 (lowest order first) and the largest
relative error of that fp32 polynomial, evaluated in fp64 on a fine grid (the kernel's fp32
Horner steps add about an ulp; tests/test_entropy.py measures the kernel's).
"""

from __future__ import annotations

import argparse

import numpy as np

LO, HI = -0.5, 0.5
GRID = np.linspace(LO, HI, 400001)


def relative_error(coeffs: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.polynomial.polynomial.polyval(x, coeffs) / np.exp2(x) - 1.0


def remez(degree: int, iterations: int = 40) -> np.ndarray:
    """The degree's minimax coefficients: solve p(x_i) - 2^x_i = (-1)^i E 2^x_i on degree + 2
    points, then move the points to the extrema of the error, until they stay."""
    n = degree + 2
    x = 0.5 * (LO + HI) - 0.5 * (HI - LO) * np.cos(np.pi * np.arange(n) / (n - 1))
    coeffs = np.zeros(degree + 1)
    for _ in range(iterations):
        a = np.hstack([x[:, None] ** np.arange(degree + 1),
                       ((-1.0) ** np.arange(n) * np.exp2(x))[:, None]])  # fmt: skip
        coeffs = np.linalg.solve(a, np.exp2(x))[:-1]
        err = relative_error(coeffs, GRID)
        runs = np.split(np.arange(GRID.size), np.flatnonzero(np.diff(np.sign(err))) + 1)
        extrema = [run[np.argmax(np.abs(err[run]))] for run in runs]
        if len(extrema) != n:
            break
        x = GRID[extrema]
    return coeffs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--degrees", default="3,5", help="comma-separated degrees (default 3,5)")
    args = parser.parse_args()
    try:
        degrees = [int(d) for d in args.degrees.split(",")]
    except ValueError:
        parser.error(f"--degrees: integers separated by commas, not {args.degrees!r}")
    for degree in degrees:
        if not 1 <= degree <= 8:
            parser.error(f"--degrees: each from 1 to 8, not {degree}")
        c32 = remez(degree).astype(np.float32)
        err = np.abs(relative_error(c32.astype(np.float64), GRID)).max()
        print(f"degree {degree}: relative error {err:.3g} (2^{np.log2(err):.1f})")
        print("  " + ", ".join(repr(float(c)) for c in c32))


if __name__ == "__main__":
    main()
