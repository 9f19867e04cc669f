"""The shared DP-SGD engine (dpfed.algorithms.dpsgd) with a learner it was not written for: logistic
regression, whose per-record gradient (sigmoid(x.w) - y) x and ghost norms |sigmoid(x.w) - y| |x| are
written here. The engine's clipped sums (ghost and by rows) are compared with a per-record Python loop
(Abadi et al. 2016, Alg. 1: g / max(1, |g| / C))."""
from __future__ import annotations

import dp_accounting
import numpy as np
import pytest

from dpfed.algorithms import dpsgd
from dpfed.core import accounting
from dpfed.core.rng import SecureRNG


class LogReg:
    """Logistic loss at weights w: a PerRecordGradient with ghost clipping (or without, ``ghosts=False``)."""

    def __init__(self, w: np.ndarray, ghosts: bool = True) -> None:
        self.w, self.ghosts = w, ghosts

    @property
    def dimension(self) -> int:
        return self.w.size

    def _residual(self, X, y):
        return 1.0 / (1.0 + np.exp(-(X @ self.w))) - y

    def rows(self, X, y):
        return self._residual(X, y)[:, None] * X

    def ghost(self, X, y):
        if not self.ghosts:
            return None
        r = self._residual(X, y)

        class Batch:
            def norms(self):
                return np.abs(r) * np.linalg.norm(X, axis=1)

            def weighted_sum(self, s):
                return X.T @ (s * r)
        return Batch()


def _naive(X, y, w, clip):
    total, clipped = np.zeros(len(w)), 0
    for x, t in zip(X, y, strict=True):  # deliberately one record at a time
        g = (1.0 / (1.0 + np.exp(-x @ w)) - t) * x
        n = np.linalg.norm(g)
        clipped += n > clip
        total += g / max(1.0, n / clip)
    return total, clipped


@pytest.mark.parametrize("ghosts", [True, False])
def test_clipped_sum_of_a_logistic_regression_matches_a_per_record_loop(ghosts):
    gen = np.random.default_rng(0)
    X, y, w = gen.normal(size=(300, 7)) * 3, gen.integers(0, 2, 300).astype(float), gen.normal(size=7)
    for clip in (0.1, 1.0, 100.0):
        got = dpsgd.clipped_sum(LogReg(w, ghosts), X, y, clip)
        want, clipped = _naive(X, y, w, clip)
        np.testing.assert_allclose(got.vector, want, rtol=1e-12, atol=1e-12)
        assert got.clipped == clipped and (0 < clipped < 300 or clip != 1.0)
        rows = dpsgd.clipped_rows(LogReg(w, ghosts), X, y, clip)
        assert rows.shape == (300, 7) and np.all(np.linalg.norm(rows, axis=1) <= clip)
        np.testing.assert_allclose(rows.sum(0), want, rtol=1e-12, atol=1e-12)
        chunks = list(dpsgd.clipped_row_chunks(LogReg(w, ghosts), X, y, clip, 64))
        assert [len(c) for c in chunks] == [64, 64, 64, 64, 44]
        np.testing.assert_array_equal(np.concatenate(chunks), rows)
    empty = dpsgd.clipped_sum(LogReg(w, ghosts), X[:0], y[:0], 1.0)
    assert np.array_equal(empty.vector, np.zeros(7)) and empty.clipped == 0


def test_clip_rows_zeroes_a_row_whose_norm_is_not_finite():
    """A NaN would survive clipping and noise and tell whether the record was sampled: such a row
    (inf or NaN entries, or a norm that overflows) becomes zero; rows inside the ball are kept bit for bit."""
    rows = np.array([[0.3, 0.4], [np.inf, 1.0], [np.nan, 0.0], [1e200, 1e200], [3.0, 4.0]])
    norms = dpsgd.clip_rows(rows, 1.0)
    assert np.all(np.isfinite(rows))
    np.testing.assert_array_equal(rows[:4], [[0.3, 0.4], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(rows[4], [0.6, 0.8])
    assert norms[0] == 0.5 and norms[4] == 5.0 and not np.isfinite(norms[1:4]).any()


def test_step_noise_and_events():
    """The noisy sum's event is the Gaussian at the multiplier asked for; the step's planned event is its
    Poisson-subsampled version; the noise has the planned spread (|mean| < 6 sd over 20,000 coordinates:
    false alarm below 1e-8)."""
    z, clip, q = 1.5, 2.0, 0.05
    noisy, event = dpsgd.noisy_sum(np.zeros(20_000), clip, z, SecureRNG.from_seed(1))
    assert event == dp_accounting.GaussianDpEvent(z)
    assert dpsgd.step_event(q, z) == dpsgd.subsampled(q, event) == dp_accounting.PoissonSampledDpEvent(q, event)
    assert abs(noisy.mean()) < 6 * z * clip / np.sqrt(20_000) and abs(noisy.std() / (z * clip) - 1) < 0.03
    mask = dpsgd.poisson_sample(SecureRNG.from_seed(2), 100_000, q)
    assert mask.dtype == bool and abs(mask.mean() - q) < 6 * np.sqrt(q * (1 - q) / 100_000)


def test_calibrate_meets_the_target_with_a_prior_and_keeps_a_given_multiplier():
    prior = dp_accounting.GaussianDpEvent(5.0)
    plan = dpsgd.calibrate(1.0, 1e-5, 0.1, dpsgd.steps_for(2, 0.1), prior=prior)
    assert plan.steps == 20 and plan.sampling_rate == 0.1
    assert plan.event == accounting.compose([prior, accounting.dp_sgd_event(plan.noise_multiplier, 0.1, 20)])
    assert accounting.epsilon(plan.event, 1e-5) <= 1.0 + 1e-6
    looser = accounting.compose([prior, accounting.dp_sgd_event(plan.noise_multiplier * 0.98, 0.1, 20)])
    assert accounting.epsilon(looser, 1e-5) > 1.0  # the smallest multiplier, not just any that fits
    given = dpsgd.calibrate(1.0, 1e-5, 0.1, 20, prior=prior, noise_multiplier=3.0)
    assert given.noise_multiplier == 3.0


def test_optimizer_steps():
    """SGD passes the gradient through at rate lr / (1 + decay (t - 1) / T); Adam's first step is
    g / (|g| + eps) (bias-corrected moments g and g^2), and a constant gradient keeps that direction."""
    assert dpsgd.decayed_rate(0.5, 9.0, 1, 10) == 0.5 and dpsgd.decayed_rate(0.5, 9.0, 11, 10) == 0.05
    g = np.array([3.0, -0.5, 0.0])
    upd, m, v = dpsgd.direction("sgd", g, None, None, 1)
    assert upd is g and m is None and v is None
    m = v = None
    for t in range(1, 4):
        upd, m, v = dpsgd.direction("adam", g, m, v, t)
        np.testing.assert_allclose(upd, g / (np.abs(g) + 1e-8), rtol=1e-12)
    with pytest.raises(ValueError, match="optimizer"):
        dpsgd.direction("rmsprop", g, None, None, 1)
