"""diagnostics: a fit at the prior, or one whose EP restarted from the prior, says so (warning + attributes)."""
import warnings

import numpy as np
import pytest
import torch

from sgpc import GPClassifier, diagnostics
from sgpc.diagnostics import DegenerateFitWarning, FitDiagnostics


def _data(scale: float = 1.0):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 3))
    y = np.argmax(X + 0.3 * rng.normal(size=(60, 3)), 1)
    return X * scale, y


def _fit(method, scale=1.0, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = GPClassifier(method=method, n_inducing=6, max_iter=8, random_state=0, tol=None, **kw).fit(*_data(scale))
    return est, [w for w in caught if issubclass(w.category, DegenerateFitWarning)]


@pytest.mark.parametrize("method, scale, ls", [("ep", 1.0, 1e-3), ("ep", 1e6, 1.0), ("vi", 1.0, 1e-3), ("sep", 1.0, 1e-3)])
def test_a_fit_that_stays_at_the_prior_warns(method, scale, ls):
    # every training row is thousands of length-scales from every inducing input: K_uf ≈ 0, no site or gradient
    # reaches q, and the probabilities are uniform (training error 0.62 on the data) — once in silence
    est, caught = _fit(method, scale, kernel_params={"init_lengthscale": ls})
    assert est.at_prior_ and est.prior_distance_ < diagnostics.TOL
    assert len(caught) == 1 and "ended at the prior" in str(caught[0].message) \
        and "init_lengthscale" in str(caught[0].message)
    p = est.predict_proba(_data(scale)[0])                 # the prior's: one distribution for every row
    np.testing.assert_allclose(p, np.broadcast_to(p[:1], p.shape), rtol=0, atol=2 * diagnostics.TOL)


def test_an_ordinary_fit_is_not_at_the_prior():
    est, caught = _fit("ep")
    assert not est.at_prior_ and est.prior_distance_ > 0.1 and not est.stalled_ and not caught


def test_prior_distance_is_zero_at_the_prior_and_counts_resets():
    est, _ = _fit("vi")
    X = torch.as_tensor(_data()[0])
    prior = diagnostics.prior_posterior(est.model_)
    found = diagnostics.diagnose(est.model_, prior, X, converged=True, counters={"reset": 2})
    assert found == FitDiagnostics(converged=True, at_prior=True, prior_distance=0.0, reset=2) and found.stalled
    assert diagnostics.diagnose(est.model_, est.posterior_, X[:0], True, {}).at_prior is False     # no rows: no claim


def test_an_ep_restart_from_the_prior_is_a_warning():
    with pytest.warns(DegenerateFitWarning, match=r"reset latent functions to the prior 3 time\(s\).*damping"):
        diagnostics.warn(FitDiagnostics(True, False, 0.5, reset=3), "rmgpc", stacklevel=1)
