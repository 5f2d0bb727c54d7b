"""Matrix form (paper Eq. (5)-(9)) vs Kronecker form vs the product form of spec 3.5."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mechanisms.metric_ldp import DimSpec, GroupSpec, estimate_numpy, range_query
from mechanisms.metric_ldp.matrix import (
    B1,
    B1_inv,
    B_kron,
    B_kron_inv,
    cell_estimates,
    cell_estimates_matrix,
    observations,
)


def _B_recursive(m, D):
    """Recursion (6): blocks +B_{d-1} on/below the block diagonal, -B_{d-1} above."""
    if D == 1:
        return B1(m)
    P = _B_recursive(m, D - 1)
    return np.block([[P if j <= i else -P for j in range(m)] for i in range(m)])


def _Binv_recursive(m, D):
    """Recursion (9): 1/2 [[B',0..0,B'], [-B',B',0..], ..., [0..,-B',B']]."""
    if D == 0:
        return np.eye(1)
    P = _Binv_recursive(m, D - 1)
    k = P.shape[0]
    out = np.zeros((m * k, m * k))
    for i in range(m):
        if i == 0:
            out[:k, :k] += P / 2
            out[:k, (m - 1) * k :] += P / 2
        else:
            out[i * k : (i + 1) * k, (i - 1) * k : i * k] = -P / 2
            out[i * k : (i + 1) * k, i * k : (i + 1) * k] = P / 2
    return out


@pytest.mark.parametrize("m,D", [(1, 1), (1, 2), (2, 1), (3, 2), (4, 3), (2, 4)])
def test_B_Binv_identity_and_recursions(m, D):
    B, Bi = B_kron([m] * D), B_kron_inv([m] * D)
    assert np.allclose(B @ Bi, np.eye(m**D)) and np.allclose(Bi @ B, np.eye(m**D))
    assert np.array_equal(B, _B_recursive(m, D))
    assert np.allclose(Bi, _Binv_recursive(m, D))
    # each row of B^-1 has 2^D nonzeros of magnitude 2^-D (App. A.4) when m >= 2
    if m >= 2:
        assert all(np.count_nonzero(r) == 2**D for r in Bi)
        assert np.allclose(np.abs(Bi[Bi != 0]), 2.0**-D)


def test_B_definition_and_unequal_sizes():
    ms = (3, 2, 4)
    B = B_kron(ms)
    cells = list(itertools.product(*[range(1, m + 1) for m in ms]))
    ind = lambda x: (x[0] - 1) + ms[0] * (x[1] - 1) + ms[0] * ms[1] * (x[2] - 1)
    for x in cells:  # B[x, x'] = (-1)^{S_>(x', x)} (Eq. (5)), dimension 1 fastest
        for y in cells:
            assert B[ind(x), ind(y)] == (-1) ** sum(a > b for a, b in zip(y, x))
    assert np.allclose(B @ B_kron_inv(ms), np.eye(24))
    assert np.allclose(B1_inv(1), [[1.0]])


def test_paper_example_observation():
    """Paper 4.1: n=2, D=2, m=3 -> o_(1,1) = 0."""
    R1 = [[1, -1, 1], [-1, -1, -1]]
    R2 = [[1, 1, -1], [1, -1, -1]]
    bits = (np.array([np.ravel(R1), np.ravel(R2)]) + 1) // 2
    spec = GroupSpec((DimSpec(0, 1, 3, 1.0), DimSpec(0, 1, 3, 1.0)))
    o = observations(bits, spec)
    assert o[0, 0] == 0 and o[0, 1] == -2  # o_(1,2) = 1*(-1) + 1*(-1)
    # the Kronecker ordering of the flattened o matches ind(x): dimension 1 fastest
    oflat = np.array(
        [
            sum(np.prod([np.ravel(R)[d * 3 + x[d] - 1] for d in range(2)]) for R in (R1, R2))
            for x in [(a, b) for b in (1, 2, 3) for a in (1, 2, 3)]
        ]
    )
    assert np.array_equal(o.ravel(order="F"), oflat)


@pytest.mark.parametrize("ms,eps", [((5,), (1.0,)), ((3, 4), (0.8, 1.4)), ((2, 3, 3), (1.0, 1.0, 2.0))])
def test_product_form_equals_matrix_form(ms, eps):
    rng = np.random.default_rng(7)
    spec = GroupSpec(tuple(DimSpec(0, 1, m, e) for m, e in zip(ms, eps)))
    bits = rng.integers(0, 2, (60, sum(ms)))
    C = cell_estimates_matrix(bits, spec)  # kappa^D B^-1 o applied axis-wise (Eq. (7))
    # against the dense Kronecker matrix (Eq. (7) literally)
    kap = np.prod([d.kappa for d in spec.dims])
    dense = kap * B_kron_inv(ms) @ observations(bits, spec).ravel(order="F")
    assert np.allclose(C.ravel(order="F"), dense)
    assert np.allclose(cell_estimates(bits, spec, "paper"), C)
    for box in itertools.product(*[[(l, r) for l in range(1, m + 1) for r in range(l, m + 1)] for m in ms]):
        q = range_query(spec, dict(enumerate(box)))
        sl = tuple(slice(l - 1, r) for l, r in box)
        assert estimate_numpy(bits, spec, q, "paper") == pytest.approx(
            C[sl].sum(), abs=1e-9 * (1 + abs(C).sum())
        )


def test_lemma1_erratum_prefix_form():
    """1-D paper estimator: c([1,r]) = kappa (o_r + o_m)/2 (spec 7.1), not kappa(o_1 + o_r)/2."""
    rng = np.random.default_rng(7)
    spec = GroupSpec((DimSpec(0, 1, 6, 1.0),))
    bits = rng.integers(0, 2, (40, 6))
    o = (2 * bits - 1).sum(axis=0)
    assert o[0] != o[5]  # else the typo form coincides
    k = spec.dims[0].kappa
    typo_differs = 0
    for r in range(1, 6):
        est = estimate_numpy(bits, spec, range_query(spec, {0: (1, r)}), "paper")
        assert est == pytest.approx(k * (o[r - 1] + o[5]) / 2)
        typo_differs += est != pytest.approx(k * (o[0] + o[r - 1]) / 2)
    assert typo_differs >= 3


def test_known_n_trivial_dimensions_add_nothing():
    rng = np.random.default_rng(5)
    s2 = GroupSpec((DimSpec(0, 1, 4, 1.0), DimSpec(0, 1, 3, 0.5)))
    s1 = GroupSpec((DimSpec(0, 1, 4, 1.0),))
    bits = rng.integers(0, 2, (50, 7))
    q2, q1 = range_query(s2, {0: (2, 3)}), range_query(s1, {0: (2, 3)})
    assert estimate_numpy(bits, s2, q2, "known_n") == pytest.approx(
        estimate_numpy(bits[:, :4], s1, q1, "known_n")
    )
    assert estimate_numpy(bits, s2, q2, "paper") != pytest.approx(
        estimate_numpy(bits[:, :4], s1, q1, "paper")
    )
