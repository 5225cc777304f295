"""Bayesian-SVM paper §4.3.2 / Fig. 6: FGSM attacks on the MNIST hybrid (CNN + Bayesian SVM) at increasing ε;
accuracy under attack and ROC-AUC of the variation ratio (eq. 13) for telling adversarial from clean
images (paper: ≈ 1 on MNIST). CIFAR-10 is not available offline.

FGSM (Goodfellow et al. 2014): x_adv = clip(x + ε · sign ∇_x J(x, y), 0, 1) with J the model's training
cost at (x, y) (``--attack-loss hinge``, default): for the Bayesian SVM the negative bound of eq. (12),
m + √(m² + v) of the hinge argument b = 1 + f_t − f_y (differentiable through the CNN and the marginals).
``--attack-loss nll`` uses −log P(argmax f* = y) instead; it saturates in float32 for confidently
classified images (zero gradients, so no perturbation) and gives a much weaker attack.
One adversarial image per test image. The variation ratio uses S = --samples seeded posterior samples.
Needs the model saved by bsvm_mnist_cnn.py (--model).

    python benchmarks/paper/bsvm_fgsm.py --n-test 2000 --eps 0.01 0.05 0.1 0.2 0.3

Writes results/<--out>.jsonl.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from bsvm_mnist_cnn import EXTRACTORS
from sgpc import GPClassifier
from sgpc.datasets import load
from sgpc.sparse import marginals
from sgpc.uncertainty import sample_labels, variation_ratio


def fgsm(est, X: np.ndarray, y: np.ndarray, eps: float, attack_loss: str = "hinge", batch: int = 500) -> np.ndarray:
    """Adversarial images [N,784] for the fitted hybrid ``est`` (whose model is in eval mode after ``load``)."""
    out = []
    for i in range(0, len(X), batch):
        x = torch.as_tensor(X[i:i + batch], dtype=torch.float32).requires_grad_(True)
        yb = torch.as_tensor(y[i:i + batch])
        m, v = marginals(est.model_, est.posterior_, x)
        lik = est.model_.likelihood
        if attack_loss == "hinge":
            loss = -lik.elbo_term(yb, m, v).sum()
        else:
            loss = -lik.predict_log_proba(m, v).gather(1, yb[:, None]).sum()
        (grad,) = torch.autograd.grad(loss, x)
        out.append((x + eps * grad.sign()).clamp(0.0, 1.0).detach().numpy())
    return np.concatenate(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/tmp/bsvm_mnist_hybrid.pt")
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--eps", nargs="+", type=float, default=[0.01, 0.05, 0.1, 0.2, 0.3])
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--attack-loss", choices=["hinge", "nll"], default="hinge")
    ap.add_argument("--extractor", choices=sorted(EXTRACTORS), default="cnn", help="architecture of --model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bsvm_fgsm")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    est = GPClassifier.load(args.model, feature_extractor=EXTRACTORS[args.extractor]())
    d = load("mnist")
    rng = np.random.default_rng(args.seed)
    te = rng.choice(len(d.X_test), args.n_test, replace=False)
    X, y = d.X_test[te].astype(np.float32), np.asarray(d.y_test[te]).astype(np.int64)
    C = len(est.classes_)

    def vr_acc(A):
        labels = sample_labels(est, A, args.samples, args.seed)
        return variation_ratio(labels, C), float(np.mean(est.predict(A) == y))

    vr_clean, acc_clean = vr_acc(X)
    rows = []
    print(f"clean: accuracy {acc_clean:.4f}, mean VR {vr_clean.mean():.4f}")
    for eps in args.eps:
        vr_adv, acc_adv = vr_acc(fgsm(est, X, y, eps, args.attack_loss))
        auc = roc_auc_score(np.r_[np.zeros(len(X)), np.ones(len(X))], np.r_[vr_clean, vr_adv])
        rows.append({"eps": eps, "accuracy": acc_adv, "mean_vr_adversarial": float(vr_adv.mean()),
                     "roc_auc_vr": float(auc)})
        print(f"eps {eps:.3f}: accuracy {acc_adv:.4f}, mean VR {vr_adv.mean():.4f}, ROC-AUC {auc:.4f}", flush=True)
    path = write(args.out, {"config": vars(args), "clean": {"accuracy": acc_clean, "mean_vr": float(vr_clean.mean())},
                            "attacks": rows})
    print("wrote", path)


if __name__ == "__main__":
    main()
