"""Several quantiles of one column: :class:`RecursiveQuantiles` (Kaplan, Schnapp and Stemmer
2022, add-remove model) and :func:`ascending` (sorting the split releases).

* Privacy, exactly: on a small grid the law of the recursive mechanism is computed in closed
  form (each round's exponential mechanism over the rows of its range, the ranges set by the
  earlier draws) and for every neighbour (one row added anywhere) every outcome's probability
  ratio is within e^ε — the parallel-then-sequential composition argument of the class doc.
* The implementation draws from that law: frequencies over fixed-seed draws within 4 standard
  errors of the computed probabilities.
* Accuracy: each answer within its stated rank bound d·m (+ one grid point's rows per round)
  in at least 1 − β of fixed-seed trials (a binomial tolerance), and ascending always.
* :func:`ascending` never increases the largest rank error (rearrangement in L∞)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from mechanisms import SeededSource
from mechanisms.extreme import ExtremeGrid
from mechanisms.quantile import RecursiveQuantiles, ascending, tree_depth


def _grid(U: int) -> ExtremeGrid:
    return ExtremeGrid(0.0, float(U), 1.0, U, True)


def law(hist: dict[int, int], qs: list[Fraction], eps_round: float, U: int) -> dict[tuple, float]:
    """The recursive mechanism's output law: outcome (y per q, ascending q) -> probability."""
    out: dict[tuple, float] = {}

    def walk(qs, lo, hi, q_lo, q_hi, prob, got):
        if not qs:
            yield prob, got
            return
        mid = len(qs) // 2
        q = qs[mid]
        span = q_hi - q_lo
        rel = (q - q_lo) / span if span > 0 else Fraction(1, 2)
        n = sum(c for i, c in hist.items() if lo <= i <= hi)
        w = []
        for y in range(lo, hi + 1):
            c = sum(cnt for i, cnt in hist.items() if lo <= i <= y)
            w.append(math.exp(-eps_round / 2 * abs(c - float(rel) * n)))
        z = sum(w)
        for y, wy in zip(range(lo, hi + 1), w):
            p = prob * wy / z
            got_y = {**got, q: y}
            for p_left, g_left in walk(qs[:mid], lo, y, q_lo, q, p, got_y):
                if y < hi:
                    yield from walk(qs[mid + 1 :], y + 1, hi, q, q_hi, p_left, g_left)
                else:
                    yield p_left, {**g_left, **{r: y for r in qs[mid + 1 :]}}

    for p, got in walk(sorted(qs), 0, U, Fraction(0), Fraction(1), 1.0, {}):
        key = tuple(got[q] for q in sorted(qs))
        out[key] = out.get(key, 0.0) + p
    return out


QS = [Fraction(1, 4), Fraction(1, 2), Fraction(3, 4)]


@pytest.mark.parametrize("base", [{1: 2, 3: 1}, {0: 1, 2: 2, 4: 1}, {2: 1}])
def test_every_neighbour_within_e_epsilon(base):
    """ε = 1 in L = 2 rounds: each outcome's probability moves by at most e^1 when one row is
    added at any grid point (add-remove neighbours), exactly (closed-form law)."""
    U, eps = 4, 1.0
    L = tree_depth(len(QS))
    p = law(base, QS, eps / L, U)
    assert sum(p.values()) == pytest.approx(1.0)
    worst = 0.0
    for x in range(U + 1):
        near = dict(base)
        near[x] = near.get(x, 0) + 1
        q = law(near, QS, eps / L, U)
        for key in set(p) | set(q):
            worst = max(worst, abs(math.log(p[key]) - math.log(q[key])))
    assert 0 < worst <= eps + 1e-9


def test_draws_follow_the_law():
    U, eps, hist = 4, 2.0, {0: 1, 1: 3, 3: 2, 4: 1}
    m = RecursiveQuantiles(eps, _grid(U), tuple(QS))
    p = law(hist, QS, eps / m.rounds, U)
    src, N = SeededSource(41), 6000
    freq = Counter(
        tuple(v for _, v in sorted(m.release_all(list(hist.items()), src).items())) for _ in range(N)
    )
    assert set(freq) <= set(p)
    for key, pk in p.items():
        se = math.sqrt(pk * (1 - pk) / N)
        assert abs(freq[key] / N - pk) <= 4 * se + 1e-12, (key, freq[key] / N, pk)


@pytest.mark.parametrize("k", [3, 5, 9])
def test_rank_bounds_hold_and_answers_ascend(k):
    """Each answer within its stated rank bound (d·m + d·ties) in ≥ 1 − β of 200 trials
    (binomial tolerance: at most 2·β·trials failures per q), and the answers ascend."""
    rng = np.random.default_rng(7)
    U = 1000
    values = np.clip(np.round(rng.lognormal(5, 0.8, size=2000)), 0, U).astype(int)
    hist = list(Counter(values.tolist()).items())
    ties = max(c for _, c in hist)
    qs = tuple(Fraction(i, k + 1) for i in range(1, k + 1))
    m = RecursiveQuantiles(1.0, _grid(U), qs)
    depths = m.depths()
    src, trials = SeededSource(100 + k), 200
    fails = Counter()
    for _ in range(trials):
        got = m.release_all(hist, src)
        ys = [got[q] for q in qs]
        assert ys == sorted(ys)
        for q, y in zip(qs, ys):
            err = abs(int((values <= y).sum()) - float(q) * values.size)
            fails[q] += err > m.rank_half_width(q) + depths[q] * ties
    assert all(fails[q] <= 2 * 0.05 * trials for q in qs), fails


def test_depths_and_rounds():
    m = RecursiveQuantiles(1.0, _grid(10), tuple(Fraction(i, 8) for i in range(1, 8)))
    assert m.rounds == 3 and m.round_epsilon == pytest.approx(1 / 3)
    d = m.depths()
    assert d[Fraction(1, 2)] == 1 and d[Fraction(1, 4)] == d[Fraction(3, 4)] == 2 and d[Fraction(1, 8)] == 3
    assert [tree_depth(k) for k in (1, 2, 3, 4, 7, 8)] == [1, 2, 2, 3, 3, 4]


def test_ascending_never_increases_the_largest_rank_error():
    rng = np.random.default_rng(3)
    for _ in range(300):
        values = np.sort(rng.integers(0, 50, size=rng.integers(1, 40)))
        k = int(rng.integers(2, 6))
        qs = sorted(Fraction(int(a), 100) for a in rng.choice(101, size=k, replace=False))
        ys = [int(y) for y in rng.integers(0, 50, size=k)]

        def worst(vs):
            return max(abs(int((values <= y).sum()) - float(q) * values.size) for y, q in zip(vs, qs))

        shuffled = list(itertools.islice(itertools.cycle(qs), k))
        out = ascending(ys, shuffled)
        assert out == sorted(ys)
        assert worst(out) <= worst(ys) + 1e-9
