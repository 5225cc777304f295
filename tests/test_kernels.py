"""Kernel contract tests: every kernel class in sgpc.kernels is exercised here."""
import inspect
import math

import numpy as np
import pytest
import torch

from sgpc import kernels as K

torch.set_default_dtype(torch.float64)
D, L = 3, 2


def make(name, shared=False, ard=True, noise=0.1):
    kw = dict(shared=shared, ard=ard, noise=noise, variance=1.7, lengthscale=[0.7, 1.3, 2.1] if ard else 1.1)
    return {"rbf": lambda: K.RBF(D, L, **kw), "m12": lambda: K.Matern(D, L, nu=0.5, **kw),
            "m32": lambda: K.Matern(D, L, nu=1.5, **kw), "m52": lambda: K.Matern(D, L, nu=2.5, **kw),
            "linear": lambda: K.Linear(D, L, **kw),
            "sum": lambda: K.Sum(K.Matern(D, L, nu=2.5, **kw), K.RBF(D, L, **kw))}[name]()


NAMES = ["rbf", "m12", "m32", "m52", "linear", "sum"]


def test_every_kernel_class_is_covered():
    classes = {c for _, c in inspect.getmembers(K, inspect.isclass)
               if issubclass(c, torch.nn.Module) and c.__module__ == K.__name__ and c is not K.Kernel}
    covered = {type(make(n)) for n in NAMES}
    assert classes <= covered, f"kernels without contract tests: {classes - covered}"


@pytest.fixture
def X():
    return torch.randn(7, D, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shared", [False, True])
def test_symmetric_psd_and_diag(name, shared, X):
    k = make(name, shared=shared)
    Kxx = k(X, X)
    assert Kxx.shape == (L, 7, 7)
    torch.testing.assert_close(Kxx, Kxx.transpose(-1, -2), rtol=0, atol=1e-12)
    # PSD up to rounding: smallest eigenvalue no lower than -1e-10 of the largest
    ev = torch.linalg.eigvalsh(Kxx)
    assert (ev.min(-1).values >= -1e-10 * ev.max(-1).values).all()
    # diag = diagonal of forward + latent noise
    torch.testing.assert_close(k.diag(X), Kxx.diagonal(dim1=-2, dim2=-1) + k.noise[:, None], rtol=1e-12, atol=1e-12)


def test_rbf_and_matern_closed_forms(X):
    ls = torch.tensor([0.7, 1.3, 2.1])
    r2 = (((X[:, None, :] - X[None, :, :]) / ls) ** 2).sum(-1)
    r = r2.sqrt()
    expected = {
        "rbf": torch.exp(-0.5 * r2),
        "m12": torch.exp(-r),
        "m32": (1 + math.sqrt(3) * r) * torch.exp(-math.sqrt(3) * r),
        "m52": (1 + math.sqrt(5) * r + 5 * r2 / 3) * torch.exp(-math.sqrt(5) * r),
        "linear": (X / ls) @ (X / ls).T,
    }
    for name, e in expected.items():
        torch.testing.assert_close(make(name)(X, X)[0], 1.7 * e, rtol=1e-6, atol=1e-6)


def test_per_latent_inputs_match_loop(X):
    k = make("rbf")
    Z = torch.randn(L, 4, D, generator=torch.Generator().manual_seed(1))
    Kzx = k(Z, X)
    for l in range(L):
        torch.testing.assert_close(Kzx[l], k(Z[l], X)[l])
    torch.testing.assert_close(k(X, Z).transpose(-1, -2), Kzx)


def test_shared_hyperparameters_are_one_set():
    k = make("rbf", shared=True)
    assert k.raw_lengthscale.shape == (1, D)
    assert k.lengthscale.shape == (L, D)
    kk = make("rbf", ard=False)
    assert kk.lengthscale.shape == (L, 1)


@pytest.mark.parametrize("name", ["rbf", "m52", "linear"])
def test_a_shared_kernel_is_evaluated_once_and_equals_per_latent_copies(name, X):
    # a shared kernel on [N,D] inputs returns a broadcast view (computed for one latent function);
    # its values must equal a per-latent kernel whose L parameter sets are copies of the shared one
    shared = make(name, shared=True)
    per = make(name)
    with torch.no_grad():
        for attr in ("raw_lengthscale", "raw_variance", "raw_noise"):
            getattr(per, attr).copy_(getattr(shared, attr).expand_as(getattr(per, attr)))
    Z = X[:4] + 0.1
    Ks, Kp = shared(X, Z), per(X, Z)
    assert Ks.shape == Kp.shape == (L, X.shape[0], 4) and Ks.stride(0) == 0 and Kp.stride(0) != 0
    torch.testing.assert_close(Ks, Kp, rtol=1e-13, atol=0)
    torch.testing.assert_close(shared.diag(X), per.diag(X), rtol=1e-13, atol=0)
    assert shared.diag(X).shape == (L, X.shape[0])


@pytest.mark.parametrize("name", ["rbf", "m32", "m52", "linear"])
def test_gradcheck_inputs_and_hyperparameters(name, X):
    k = make(name)
    Z = torch.randn(4, D, generator=torch.Generator().manual_seed(2), requires_grad=True)
    Xg = X.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: k(a, b), (Xg, Z))
    names = [n for n, _ in k.named_parameters()]
    inputs = tuple(p.detach().clone().requires_grad_(True) for p in k.parameters())

    def f(*ps):
        return torch.func.functional_call(k, dict(zip(names, ps)), (X, Z.detach()))

    assert torch.autograd.gradcheck(f, inputs)


def test_positive_transform_roundtrip():
    v = torch.tensor([1e-4, 0.3, 5.0, 300.0])
    torch.testing.assert_close(K.positive(K.inverse_positive(v)), v, rtol=1e-10, atol=1e-12)


def test_bad_shapes_raise():
    k = make("rbf")
    with pytest.raises(ValueError, match=r"\[N,3\]"):
        k(torch.zeros(4, 2), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="nu"):
        K.Matern(D, L, nu=2.0)


@pytest.mark.parametrize("nu", [None, 0.5, 2.5])
def test_float32_distances_do_not_cancel(nu):
    # ‖x‖² + ‖z‖² − 2x·z in float32 cancelled: a copied row (random inducing inputs are copies) gave
    # Matérn-½ off by 0.022 at ℓ = 0.1, and inputs offset by 1000 an RBF off by 0.63 (kernel_float32.py)
    g = torch.Generator().manual_seed(0)
    X64 = torch.randn(50, 10, generator=g, dtype=torch.float64)
    for offset, ls in ((0.0, 0.1), (0.0, 1.0), (1000.0, 1.0)):
        kernel = K.RBF(10, 1, lengthscale=ls) if nu is None else K.Matern(10, 1, nu=nu, lengthscale=ls)
        X = (X64 + offset).float()
        Z = X[::5].clone()                                                 # copies of rows, other tensors
        got = kernel.float()(X, Z)[0].double()
        want = kernel.double()(X.double(), Z.double())[0]    # the same float32 inputs, float64 throughout
        torch.testing.assert_close(got, want, rtol=0, atol=2e-6)
        assert (got[torch.arange(0, 50, 5), torch.arange(10)] > 1 - 2e-6).all()


@pytest.mark.parametrize("nu", [None, 0.5, 2.5])
def test_float32_expansion_stays_narrow_only_where_accurate(nu):
    # a float32 kernel expands in float64 only where float32's rounding of d² would exceed the kernel's
    # tolerance: always widening doubled K_uu/K_uf with per-latent Z on MNIST (kernel_float32.py --time)
    g = torch.Generator().manual_seed(0)
    X = torch.rand(200, 784, generator=g, dtype=torch.float32)          # MNIST-shaped, pixels in [0, 1]
    Z = torch.rand(3, 40, 784, generator=g, dtype=torch.float32)
    Z[:, :4] = X[:4]                                                    # copies, as initial inducing inputs
    kernel = (K.RBF(784, 3, lengthscale=7.0) if nu is None else K.Matern(784, 3, nu=nu, lengthscale=7.0)).float()
    centre = Z.reshape(-1, 784).mean(0)                 # the model's side (Z, all latent functions) is the centre
    widened = kernel._wide_columns(kernel.scaled_sqnorm(Z - centre), kernel.scaled_sqnorm(X - centre), False)
    assert widened is (True if nu == 0.5 else None)                     # only Matérn-½ (k ≈ 1 − √d²) widens
    for A, B in ((Z, X), (Z, Z)):
        got = kernel(A, B).double()
        want = kernel.double()(A.double(), B.double())
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)        # a tenth of float32's base jitter
    far = kernel._wide_columns(kernel.scaled_sqnorm(Z - centre), kernel.scaled_sqnorm((X - centre) * 100), False)
    assert far is True                                                  # 10⁴×: widen
    assert kernel(Z, X[:0]).shape == (3, 40, 0) and kernel(X[:0], Z).shape == (3, 0, 40)   # empty sides


def test_k_uu_from_differences_stays_psd_at_tiny_length_scales():
    # a fitted RMGPC on iris (a duplicated row) reached length-scales of 6e-5: the expansion's rounding,
    # ~eps·‖x‖²/ℓ², left K_uu with an eigenvalue of −5.6e-8 of its mean diagonal (a JitterWarning);
    # K(X, X) of a small X is now computed from the differences
    g = torch.Generator().manual_seed(0)
    X = torch.randn(60, 4, generator=g, dtype=torch.float64)
    X[:, 2:] = torch.round(X[:, 2:] * 3) / 3 + 2.0         # few distinct values, as iris's 0.1 cm steps
    X = torch.cat([X, X[:1]])                                          # a duplicated row
    kernel = K.RBF(4, 1, lengthscale=[5.0, 6.4, 7e-4, 6.3e-5])
    Kxx = kernel(X, X)[0]
    assert torch.linalg.eigvalsh(Kxx).min() > -1e-13
    assert Kxx[0, 60] == Kxx[0, 0] == 1.0                             # duplicates exactly equal
    ref = torch.exp(-0.5 * (((X[:, None, :] - X[None, :, :]) / kernel.lengthscale[0]) ** 2).sum(-1))
    torch.testing.assert_close(Kxx, ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("shared_inputs", [True, False])
def test_k_from_differences_with_one_length_scale_for_every_feature(shared_inputs):
    # ard=False keeps one length-scale ([S, 1]); the differences' 2-D branch multiplied [N,N,D] by it as a
    # matrix and failed for D > 1 (K(X, X) at ℓ = 0.01, or K_uu of unstandardised inducing inputs)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(6, 3, generator=g, dtype=torch.float64)
    if not shared_inputs:
        X = X.expand(2, 6, 3) * torch.tensor([1.0, 2.0], dtype=torch.float64)[:, None, None]
    for ls in (1.0, 0.01):
        kernel = K.RBF(3, 2 if not shared_inputs else 1, ard=False, lengthscale=ls)
        Kxx = kernel(X, X)
        ref = torch.exp(-0.5 * ((X[..., :, None, :] - X[..., None, :, :]) ** 2).sum(-1) / ls ** 2)
        torch.testing.assert_close(Kxx, ref.expand_as(Kxx), rtol=0, atol=1e-14)


@pytest.mark.parametrize("a3,b3,same", [(0, 0, 0), (0, 0, 1), (1, 0, 0), (0, 1, 0), (1, 1, 0), (1, 1, 1)])
@pytest.mark.parametrize("n_sets", [1, 3])
@pytest.mark.parametrize("ard", [True, False])
def test_hand_written_squared_distance_gradient(a3, b3, same, n_sets, ard):
    # _CentredSqDist's backward is written out (kernels.py docstring); against the differences themselves and
    # finite differences, for every input layout the kernels pass: 2-D or per-latent inputs, one or L
    # length-scale sets, ARD or one length-scale, and A is B (K_uu, whose two arguments share the gradient)
    g = torch.Generator().manual_seed(3)
    Lat, N, M, Dm = 3, 5, 4, 6
    A = torch.randn(*((Lat, N, Dm) if a3 else (N, Dm)), generator=g).requires_grad_(True)
    B = A if same else torch.randn(*((Lat, M, Dm) if b3 else (M, Dm)), generator=g).requires_grad_(True)
    w = (torch.rand(n_sets, Dm if ard else 1, generator=g) + 0.5).requires_grad_(True)
    A3, B3 = (A if A.ndim == 3 else A[None]), (B if B.ndim == 3 else B[None])
    ref = ((A3[..., :, None, :] - B3[..., None, :, :]) ** 2 * w[:, None, None, :]).sum(-1)
    out = K._CentredSqDist.apply(A, B, w, bool(same))
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    if same:
        assert torch.autograd.gradcheck(lambda a, v: K._CentredSqDist.apply(a, a, v, True), (A, w))
    else:
        assert torch.autograd.gradcheck(lambda a, b, v: K._CentredSqDist.apply(a, b, v, False), (A, B, w))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("per_latent_z", [False, True])
def test_a_query_rows_column_depends_on_that_row_only(name, dtype, per_latent_z):
    # k(Z, X) is centred on Z (the model's side) and a float32 kernel widens per query row: a far row among the
    # query rows moved the others' distances (centred on the mean of X) — a prediction depended on the batch
    g = torch.Generator().manual_seed(1)
    kernel = make(name).to(dtype)
    Z = torch.randn(L, 5, D, generator=g) if per_latent_z else torch.randn(5, D, generator=g)
    X = torch.randn(9, D, generator=g)
    Z, X = Z.to(dtype), X.to(dtype)
    base = kernel(Z, X)
    big = 1e30 if dtype == torch.float32 else 1e200
    for far in (1e3, 1e8, big):
        X_far = torch.cat([X, torch.tensor([[far, -far, 0.0]], dtype=dtype)])
        got = kernel(Z, X_far)
        # the same shape, so the same products: bitwise
        torch.testing.assert_close(kernel(Z, torch.cat([X, X[:1]]))[..., :9], got[..., :9], rtol=0, atol=0)
        torch.testing.assert_close(got[..., :9], base, rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-6)
        if name != "linear" and far >= 1e8:             # a stationary kernel's value at a far row is 0, not NaN
            assert torch.isfinite(got).all() and (got[..., 9] == 0).all()


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5])
def test_matern_at_an_infinite_distance_is_zero(nu):
    # (1 + s + s²/3) e^(−s) at s = inf was inf·0 = NaN: a row at 1e200 (d² overflows to inf) predicted NaN
    kernel = K.Matern(D, 1, nu=nu)
    Z = torch.randn(4, D, generator=torch.Generator().manual_seed(2))
    k = kernel(Z, torch.tensor([[1e200, 0.0, 0.0], [0.0, 1e300, -1e300]]))
    assert torch.equal(k, torch.zeros_like(k))
