"""The grid hourglass's exact samplers at high eps (mechanisms/mean/grid.py; add-remove mean spec 2.4, 6.7).

At the serving grid M = 2^20 the central step holds 2G - 1 cells with G = round(gamma* M),
which reaches 1 near eps = 40, so P(J != 0) = 2M b / ((2G - 1)(1 - b) + 2M b), b = e^-eps,
goes to 0. A sampler that proposes J = 0 and keeps it with probability (2G - 1)/(2M) needs
about 2M/(2G - 1) rounds per draw there (2^21 at G = 1); the samplers draw [J != 0] as one
exact coin instead, so a draw costs O(1) primitive draws at every eps. The cost is counted in
primitive draws of the source (no wall clock); the source stops a run that exceeds a budget
far above O(1) per draw, so a sampler whose rounds grow with 1/P(J != 0) fails instead of
hanging.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from config import parse_config
from mechanisms.exact_real import tilted_share_interval
from mechanisms.mean import GridHourglass
from mechanisms.rng import SeededSource
from proxy.pipeline import release
from proxy.pipeline.noise import BatchNoise, NoisePool
from proxy.pipeline.release import noisy_answer
from rewriter import build_plan, parse
from support.service import Service, ask, backend_rows, make_config

SERVING_GRID = 1 << 20
P_MIN = 1e-3  # the chi-square convention of tests/mean/test_mean_grid.py


class CountedSource(SeededSource):
    """A seeded source that counts its primitive draws (randbelow, getrandbits: ``bernoulli``
    and the 64-bit words of the array forms go through them) and refuses to go past ``cap``."""

    def __init__(self, seed: int, cap: int) -> None:
        super().__init__(seed)
        self.calls, self.cap = 0, cap

    def _count(self) -> None:
        self.calls += 1
        if self.calls > self.cap:
            raise RuntimeError(f"more than {self.cap} primitive draws")

    def randbelow(self, n: int) -> int:
        self._count()
        return super().randbelow(n)

    def getrandbits(self, k: int) -> int:
        self._count()
        return super().getrandbits(k)


DRAWS = 200
CAP = 1000 * DRAWS  # ~17 primitive draws per scalar draw are expected; 2^21 rounds are not


def _calls_per_draw(eps: Fraction, batch: bool) -> float:
    hg = GridHourglass(eps, SERVING_GRID)
    src = CountedSource(5, CAP)
    if batch:
        hg.sample_many(DRAWS, src)
    else:
        for _ in range(DRAWS):
            hg.sample_exact(src)
    return src.calls / DRAWS


@pytest.mark.parametrize("batch", [False, True])
def test_exact_draw_cost_does_not_grow_with_eps(batch):
    """Primitive draws per (I, K) at eps 30, 50, 100 (G = 38, 1, 1) stay within twice those at
    eps 1: one lazy uniform for [J != 0], the step's geometric only when J != 0, a uniform
    cell, and the discrete Laplace of CKS Alg. 2, whose expected draws do not grow with eps."""
    assert GridHourglass(Fraction(100), SERVING_GRID).G == 1
    reference = _calls_per_draw(Fraction(1), batch)
    for eps in (30, 50, 100):
        assert _calls_per_draw(Fraction(eps), batch) <= 2 * reference


def _sign_cells(i: np.ndarray, hg: GridHourglass) -> np.ndarray:
    return np.sign(hg.step(i)) + 1  # J < 0, J = 0, J > 0


def _sign_law(hg: GridHourglass) -> np.ndarray:
    """P(J < 0), P(J = 0), P(J > 0) = (x/2, 1 - x, x/2), x = 2M b/((2G - 1)(1 - b) + 2M b)
    (add-remove mean spec Lemma 3 on the grid: P(J = 0) = (2G - 1)/Zs, Zs = (2G - 1) + 2M b/(1 - b))."""
    b = math.exp(-hg.eps)
    x = 2 * hg.grid * b / ((2 * hg.G - 1) * -math.expm1(-hg.eps) + 2 * hg.grid * b)
    return np.array([x / 2, 1 - x, x / 2])


@pytest.mark.parametrize("batch", [False, True])
def test_exact_samplers_have_the_grid_law_where_the_step_is_rare(batch):
    """eps 15 with G = 1 at M = 2^20: P(J != 0) = 0.39, where proposing J = 0 and keeping it
    with probability 1/2M would need ~1.3e6 rounds a draw. Chi-square goodness of fit of the
    sign of J against (x/2, 1 - x, x/2) (:func:`_sign_law`), of the cell within the outer
    steps against uniform (16 bins), and of |J| = 1 given J != 0 (P(|J| >= 2 | J != 0) = b =
    3e-7: no draw of 20000 expected there). The law at eps 15.5 (x = 0.28) is rejected."""
    n = 20_000
    hg = GridHourglass(Fraction(15), SERVING_GRID, gamma=1 / SERVING_GRID)
    assert hg.G == 1
    src = CountedSource(2024, 200 * n)
    if batch:
        i, _ = hg.sample_many(n, src)
    else:
        i = np.array([hg.sample_exact(src)[0] for _ in range(n)])
    obs = np.bincount(_sign_cells(i, hg), minlength=3)
    assert stats.chisquare(obs, n * _sign_law(hg)).pvalue > P_MIN
    wrong = GridHourglass(Fraction(31, 2), SERVING_GRID, gamma=1 / SERVING_GRID)
    assert stats.chisquare(obs, n * _sign_law(wrong)).pvalue < 1e-6
    outer = hg.step(i) != 0
    assert np.all(np.abs(hg.step(i[outer])) == 1)
    pos = (np.abs(i[outer]) - hg.G) % hg.grid
    assert stats.chisquare(np.bincount(pos >> 16, minlength=16)).pvalue > P_MIN
    assert np.abs(i[~outer]).max() <= hg.G - 1


@pytest.mark.parametrize("eps", [30.0, 50.0, 100.0])
def test_avg_release_completes_at_high_eps(eps):
    """SELECT AVG(age) FROM pums at a tier's eps 30, 50, 100: the live release, the noise pool
    drawn while the scan runs, and a 200-cell GROUP BY release (batch path, and its noise
    drawn ahead by BatchNoise) finish within the draw budget. Each cell's reported 95%
    half-width bounds its error (seeded; at these eps the noise is a few grid units)."""
    cfg = parse_config(make_config(purchases="rows"))
    plan = build_plan(parse("SELECT AVG(age) FROM pums"), cfg)
    cells = [(19_000, 480)]
    live = noisy_answer(plan, cells, eps, CountedSource(1, 10_000))
    assert abs(live["values"][0][0] - 19_000 / 480) <= live["half_width"][0]
    pool = NoisePool(plan, eps, CountedSource(1, 10_000))
    pool.start()
    assert noisy_answer(plan, cells, eps, SeededSource(9), pool)["values"] == live["values"]

    grouped = build_plan(parse("SELECT item, AVG(amount) FROM purchases GROUP BY item"), cfg)
    rng = np.random.default_rng(4)
    many = [
        (item, float(rng.uniform(0, 500) * n), n)
        for item, n in zip(range(1, 201), rng.integers(1, 40, 200).tolist())
    ]
    assert grouped.n_cells >= release.BATCH_MIN_CELLS
    ans = noisy_answer(grouped, many, eps, CountedSource(2, 200 * 1000))
    errors = [abs(v[0] - s / n) for v, (_, s, n) in zip(ans["values"], many)]
    assert max(errors) <= max(ans["half_width"])
    pre = BatchNoise(grouped, eps, CountedSource(2, 200 * 1000))
    pre.start()
    assert noisy_answer(grouped, many, eps, SeededSource(8), predrawn=pre.take(len(many))) == ans


@pytest.mark.parametrize(
    "a,b,wa,wb",
    [
        (1, 1, 1, 2),
        (15, 1, 1, 1 << 21),
        (100, 1, 1, 1 << 21),
        (3, 10, 873961, 1 << 21),
        (30, 1, 75, 1 << 21),
        (1, 10**9, 1, 1),
    ],
)
@pytest.mark.parametrize("prec", [0, 32, 96])
def test_tilted_share_interval_brackets_the_share(a, b, wa, wb, prec):
    """lo <= 2^prec x <= hi within a few units, x = wb q/(wa (1 - q) + wb q), q = e^(-a/b),
    against x in 60-digit decimal arithmetic (Decimal.exp is correctly rounded)."""
    with localcontext() as ctx:
        ctx.prec = 60
        q = (-Decimal(a) / Decimal(b)).exp()
        x = wb * q / (wa * (1 - q) + wb * q) * (Decimal(2) ** prec)
    lo, hi = tilted_share_interval(a, b, wa, wb, prec)
    assert lo <= x <= hi and hi - lo <= 4


def test_avg_through_the_gateway_at_tier_eps_100(tmp_path):
    """A tier with eps 100 (the config's largest): SELECT AVG(age) FROM pums over the wire is
    answered, charged the tier's eps, by the hourglass, with every draw of the service (the
    noise reservoir's included) from a source that stops a run past 10^6 primitive draws; the
    answer is within the NOTICE's 95% half-width of the clamped mean (seeded)."""
    cfg = make_config(tiers={"half": {"epsilon": 100.0, "budget": 1000.0, "period": "day"}})
    svc = Service(cfg, tmp_path / "state", source=CountedSource(6, 10**6)).start()
    try:
        rows, notes = ask(svc, "SELECT AVG(age) FROM pums", role="half")
        true_avg = backend_rows(svc, "SELECT AVG(LEAST(GREATEST(age, 0), 100)) FROM pums")[0][0]
    finally:
        svc.close()
    assert len(rows) == 1 and "hourglass_mean" in notes[-1] and "ε charged 100" in notes[-1]
    half_width = float(re.search(r"avg ±([0-9.e+-]+);", notes[-1]).group(1))
    assert abs(float(rows[0][0]) - float(true_avg)) <= half_width
