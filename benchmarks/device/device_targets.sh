#!/bin/bash
# The GPU session of 2026-11-28: issue 41's GPU targets and issue 43's GPU checks, in one bounded call.
#   1. throughput at M = 1 024, B = 4 096, C = 10 (MNIST): sgpc against GPyTorch's VariationalStrategy and
#      LargeBatchVariationalStrategy, float32 and float64 (peers_throughput.py, set mnist-1024);
#   2. MNIST (M = 200 per class, pixels in [0, 1]) to the paper's test NLL 0.0725 and error 2.1% on the GPU,
#      initialisation counted (scalable_ep_mnist.py);
#   3. predicting 10^5 … 10^7 rows on the GPU: peak GPU memory and RSS (predict_memory.py --device cuda);
#   4. the fuzzing checks (row independence, sums, seeds, save/load) with every fit on the GPU (fuzz.py).
# `profile` (the second call): where sgpc's step goes. `panels` (the third call, on an H200): the throughput and MNIST
# runs again after the panel path stopped synchronising at every Newton step, the compiled step, predicting 10^7
# rows from a .npy file, and the first SEP step at M = 1 024 under the profiler. `time` (the fourth call):
# time_to_target.py with sgpc and GPyTorch on the GPU.
# Run on the device machine from the repository root, with MNIST copied to .devdata/datasets/mnist; each command
# is bounded, and the results so far are packed into $OUT after each one, so a cut-off call still returns them.
# (On 2026-11-28 the MNIST runs were cut at 100 and 120 s before writing their JSON: each test evaluation took
# several seconds on the GPU; their bounds are 150 s now. Results: docs/results/scale.md, "Issue 41's GPU targets".)
export SGPC_DATA=$PWD/.devdata/datasets PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
run() {
  echo "== $(date +%T) $*"; timeout "$@" 2>&1 | grep -v -E "^W[0-9]{4} |FutureWarning|warnings.warn|^  check\("
  tar czf $OUT/results.tgz $(ls results/*_gpu*.jsonl 2>/dev/null); }
if [ "$1" = profile ]; then   # the second call: where sgpc's step goes at M = 1 024, B = 4 096; MNIST with room to finish
  run 60 python3 benchmarks/perf/gpu_profile.py --device cuda --methods vi --dtypes float32 --m 1024 --b 4096 \
      --steps 5 --warmup 3 --out gpu_profile_gpu_1024
  run 40 python3 benchmarks/perf/gpu_profile.py --device cuda --methods sep --dtypes float32 --m 1024 --b 4096 \
      --steps 1 --warmup 1 --out gpu_profile_gpu_1024_sep
  run 150 python3 benchmarks/paper/scalable_ep_mnist.py --device cuda --methods vi --scale unit --z-per-latent \
      --threads 8 --batch 4000 --lr 0.03 --minutes 1 --eval-every 250 --out scalable_ep_mnist_gpu
  run 70 python3 benchmarks/perf/predict_memory.py --device cuda --sizes 10000000 --sources array --out predict_memory_gpu
  echo "== $(date +%T) done"; exit
fi
if [ "$1" = panels ]; then   # the third call (H200): after the panel path stopped waiting for the GPU at every Newton step
  nvidia-smi -L
  run 60 python3 -c "import sys; sys.path[:0] = ['benchmarks', 'benchmarks/perf']; import peers_throughput as p; p._inducing(p._data('mnist')[0], 1024)"
  P="python3 benchmarks/perf/peers_throughput.py --device cuda --budget 6 --sets mnist-1024 --dtype float32"
  run 100 $P --libs sgpc gpytorch --methods vi --name peers_throughput_gpu_1024_f32_panels
  E="python3 benchmarks/paper/scalable_ep_mnist.py --device cuda --methods vi --scale unit --z-per-latent --threads 8"
  # a decaying rate: at a constant 0.03 the NLL rose again after its minimum (0.0718) on the second call
  run 100 $E --batch 4000 --lr 0.03 --lr-decay 0.99 --minutes 1 --eval-every 250 --out scalable_ep_mnist_gpu_panels
  run 70 python3 benchmarks/perf/predict_memory.py --device cuda --sizes 10000000 --sources npy --out predict_memory_gpu_npy
  run 100 $E --batch 4000 --lr 0.05 --lr-decay 0.98 --minutes 1 --eval-every 250 --out scalable_ep_mnist_gpu_panels
  run 90 $P --libs sgpc --methods vi-compiled --name peers_throughput_gpu_1024_f32_compiled
  run 25 python3 benchmarks/perf/gpu_profile.py --device cuda --methods sep --dtypes float32 --m 1024 --b 4096 \
      --steps 1 --warmup 0 --out gpu_profile_gpu_1024_sep_first
  echo "== $(date +%T) done"; exit
fi
if [ "$1" = time ]; then   # the fourth call (H200): time to a target NLL on the GPU, sgpc against GPyTorch, float32
  T="python3 benchmarks/perf/time_to_target.py --device cuda --dtype float32 --threads 8 --name time_to_target_gpu
     --runs sgpc-sep sgpc-vi gpytorch-adam gpytorch-ngd"
  run 240 $T --sets mnist-200 --budget 30 --eval-every 250
  run 110 $T --sets satimage-100 --budget 15 --eval-every 50
  echo "== $(date +%T) done"; exit
fi
nvidia-smi -L; python3 -c "import torch, gpytorch; print('torch', torch.__version__, 'gpytorch', gpytorch.__version__)"
# the k-means inducing inputs of mnist-1024 once, on every core (the runs themselves use one thread each)
run 60 python3 -c "import sys; sys.path[:0] = ['benchmarks', 'benchmarks/perf']; import peers_throughput as p; p._inducing(p._data('mnist')[0], 1024)"
P="python3 benchmarks/perf/peers_throughput.py --device cuda --budget 6 --sets mnist-1024 --libs sgpc gpytorch"
run 120 $P --dtype float32 --methods vi sep --name peers_throughput_gpu_1024_f32
run 60 $P --dtype float64 --methods vi --peer-methods svgp-softmax-largebatch --name peers_throughput_gpu_1024_f64
E="python3 benchmarks/paper/scalable_ep_mnist.py --device cuda --methods vi --scale unit --z-per-latent --threads 8"
# B and the rate from a CPU probe of the first 250 steps (B = 1 000: lr 0.03 ahead of 0.01; natural-gradient steps
# of q with γ = 0.1 went to NLL 5.7): on a GPU a larger minibatch costs little more per step
run 150 $E --batch 1000 --lr 0.03 --minutes 1 --eval-every 500 --out scalable_ep_mnist_gpu
run 150 $E --batch 4000 --lr 0.03 --minutes 1 --eval-every 500 --out scalable_ep_mnist_gpu
run 90 python3 benchmarks/perf/predict_memory.py --device cuda --sources array npy --out predict_memory_gpu
run 60 python3 benchmarks/perf/fuzz.py --device cuda --problems 33 --out fuzz_gpu
echo "== $(date +%T) done"
