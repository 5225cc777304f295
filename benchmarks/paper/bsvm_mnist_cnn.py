"""Bayesian-SVM paper §4.2 / Fig. 4: MNIST with the paper's small CNN + Bayesian-SVM head (hybrid model,
trained jointly by backpropagation) vs the same CNN + softmax layer: test accuracy vs epochs and time.

CNN (shared first layers, §4.2): conv(32,5,5)-conv(64,3,3)-max_pool-fc(1024)-fc(100), ReLU between,
and (our addition) a parameter-free batch normalisation of the 100 features for both heads. Without a
normalisation the features of the jointly trained CNN leave the kernel's length-scales within a few
Adam steps; with a per-row LayerNorm the CNN maps every image to one point (the variance term of the
bound drops faster than the GP mean learns to discriminate) and the hybrid stays at 10% accuracy. Batch
normalisation keeps each feature's spread over the batch at 1, so that collapse cannot happen
(docs/results-bsvm.md).
Hybrid: ``GPClassifier(method="bsvm", feature_extractor=CNN)`` — M inducing points in the 100-d
feature space, shared by the 10 classes. Baseline: CNN + Linear(100, 10) + cross-entropy. Both: Adam
(learning rate --lr), minibatch --batch, float32, the same initial CNN weights (seed). CIFAR-10 is not
available offline, so only MNIST is run.

    python benchmarks/paper/bsvm_mnist_cnn.py                                     # reduced CPU run
    python benchmarks/paper/bsvm_mnist_cnn.py --n-train 60000 --epochs 20         # the full protocol

Writes results/<--out>.jsonl (accuracy at each evaluation, with epoch and training time) and saves the
fitted hybrid to --save (used by bsvm_fgsm.py).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from sgpc import GPClassifier
from sgpc.datasets import load


class PaperCNN(nn.Module):
    """conv(32,5,5)-conv(64,3,3)-max_pool-fc(1024)-fc(100)-BatchNorm on flattened 28×28 images: [N,784] -> [N,100]."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(64 * 11 * 11, 1024), nn.ReLU(), nn.Linear(1024, 100), nn.BatchNorm1d(100, affine=False))

    def forward(self, X):
        return self.body(X.reshape(-1, 1, 28, 28))


def MLP() -> nn.Module:
    """784-256-100 ReLU MLP with the same feature normalisation (``--extractor mlp``: a cheaper CPU stand-in)."""
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 100), nn.BatchNorm1d(100, affine=False))


EXTRACTORS = {"cnn": PaperCNN, "mlp": MLP}


def softmax_baseline(Xtr, ytr, Xte, yte, args, eval_every):
    """CNN + Linear(100, 10) trained with cross-entropy; accuracy history like GPClassifier's."""
    torch.manual_seed(args.seed)
    net = nn.Sequential(EXTRACTORS[args.extractor](), nn.Linear(100, 10))
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    Xtr_t, ytr_t = torch.as_tensor(Xtr, dtype=torch.float32), torch.as_tensor(ytr)
    Xte_t = torch.as_tensor(Xte, dtype=torch.float32)
    g = torch.Generator().manual_seed(args.seed)
    hist, t_train, step = [], 0.0, 0
    n_steps = args.epochs * (len(Xtr) // args.batch)
    while step < n_steps:
        perm = torch.randperm(len(Xtr), generator=g)
        for s in range(0, len(Xtr) - args.batch + 1, args.batch):
            t0 = time.perf_counter()
            idx = perm[s:s + args.batch]
            net.train()
            opt.zero_grad()
            nn.functional.cross_entropy(net(Xtr_t[idx]), ytr_t[idx]).backward()
            opt.step()
            t_train += time.perf_counter() - t0
            step += 1
            if step % eval_every == 0 or step == n_steps:
                net.eval()
                with torch.no_grad():
                    pred = torch.cat([net(Xte_t[i:i + 2048]).argmax(1) for i in range(0, len(Xte), 2048)])
                hist.append({"iteration": step, "epoch": step * args.batch / len(Xtr), "time": t_train,
                             "accuracy": float((pred.numpy() == yte).mean())})
                print(f"softmax  step {step:5d} acc {hist[-1]['accuracy']:.4f} t {t_train:.0f}s", flush=True)
            if step == n_steps:
                break
    return hist


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-train", type=int, default=10000)
    ap.add_argument("--n-test", type=int, default=10000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--inducing", type=int, default=64)
    ap.add_argument("--evals-per-epoch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extractor", choices=sorted(EXTRACTORS), default="cnn")
    ap.add_argument("--skip-softmax", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save", default="/tmp/bsvm_mnist_hybrid.pt")
    ap.add_argument("--out", default="bsvm_mnist_cnn")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    d = load("mnist")
    rng = np.random.default_rng(args.seed)
    tr = rng.choice(len(d.X), args.n_train, replace=False) if args.n_train < len(d.X) else np.arange(len(d.X))
    te = rng.choice(len(d.X_test), args.n_test, replace=False) if args.n_test < len(d.X_test) else np.arange(len(d.X_test))
    Xtr, ytr = d.X[tr].astype(np.float32), np.asarray(d.y[tr]).astype(np.int64)
    Xte, yte = d.X_test[te].astype(np.float32), np.asarray(d.y_test[te]).astype(np.int64)
    eval_every = max(1, (len(Xtr) // args.batch) // args.evals_per_epoch)

    torch.manual_seed(args.seed)
    hybrid = GPClassifier(tol=None, method="bsvm", feature_extractor=EXTRACTORS[args.extractor](), n_inducing=args.inducing, dtype="float32",
                          batch_size=args.batch, n_epochs=args.epochs, learning_rate=args.lr,
                          random_state=args.seed, verbose=0)
    t0 = time.perf_counter()
    hybrid.fit(Xtr, ytr, X_val=Xte, y_val=yte, eval_every=eval_every)
    wall = time.perf_counter() - t0
    per_epoch = len(Xtr) // args.batch
    h_hist = [{"iteration": r["iteration"], "epoch": r["iteration"] / per_epoch, "time": r["time"],
               "accuracy": 1.0 - r["error"], "nll": r["nll"]} for r in hybrid.history_["validation"]]
    for r in h_hist:
        print(f"bsvm     step {r['iteration']:5d} acc {r['accuracy']:.4f} t {r['time']:.0f}s", flush=True)
    hybrid.save(args.save)

    s_hist = [{"accuracy": None, "time": None}] if args.skip_softmax else softmax_baseline(Xtr, ytr, Xte, yte, args, eval_every)
    payload = {"config": vars(args), "hybrid_bsvm": h_hist, "hybrid_wall_s_incl_init_and_eval": wall,
               "softmax_cnn": s_hist,
               "final": {"bsvm_accuracy": h_hist[-1]["accuracy"], "softmax_accuracy": s_hist[-1]["accuracy"],
                         "bsvm_train_s": h_hist[-1]["time"], "softmax_train_s": s_hist[-1]["time"]}}
    print("final", payload["final"])
    print("wrote", write(args.out, payload))


if __name__ == "__main__":
    main()
