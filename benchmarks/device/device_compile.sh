#!/bin/bash
# The GPU session of 2026-11-26 (fourth): the CUDA paths after the fused-Adam / hand-written-kernel changes,
# and whether CUDA graphs (torch.compile mode="reduce-overhead") cut the launch-bound MNIST-shaped step.
# Run on the device machine from the repository root, with the data sets copied to .devdata (see
# docs/results-scale.md); each command is bounded, its JSON goes to results/, the whole log to $OUT.
export SGPC_DATA=$PWD/.devdata/datasets PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cd benchmarks
run() {   # bounded; results so far are packed after each command, so a cut-off run still returns them
  echo "== $(date +%T) $*"; timeout "$@" 2>&1 | grep -v -E "^W[0-9]{4} |FutureWarning|^  check\("
  (cd .. && tar czf $OUT/results.tgz $(ls results/device_check_gpu_2.json results/vi_step_gpu_*.json \
      results/peers_throughput_gpu64_[23].json results/compile_fit_gpu_2.json 2>/dev/null)); }
S="--set mnist --m 200 --b 200 --device cuda --threads 4 --steps 100 --repeats 3"
if [ "$1" = next ]; then   # for the next session with a GPU: SEP compiled after its graphs went 15 → 8, and the peers
  run 240 python benchmarks/perf/compile_fit.py --device cuda --threads 4 --methods vi sep arpep --modes none reduce-overhead \
      --iters 600 --name compile_fit_gpu_2
  run 150 python benchmarks/perf/peers_throughput.py --device cuda --dtype float64 --budget 10 --sets mnist-200 --libs sgpc gpytorch \
      --methods vi vi-compiled sep --name peers_throughput_gpu64_3
  # (issue 4 has its own script now: benchmarks/device/device_alpha.sh)
  echo "== $(date +%T) done"; exit
fi
if [ "$1" = retry ]; then   # the second call, after the fixes that the first call's compiled runs asked for
  run 60 python benchmarks/perf/vi_step.py $S --method vi --name vi_step_gpu_vi_f64_eager_2
  run 120 python benchmarks/perf/vi_step.py $S --method vi --compile --compile-mode reduce-overhead --name vi_step_gpu_vi_f64_graphs
  run 120 python benchmarks/perf/vi_step.py $S --method sep --compile --compile-mode reduce-overhead --name vi_step_gpu_sep_f64_graphs
  run 60 python benchmarks/perf/vi_step.py $S --method sep --name vi_step_gpu_sep_f64_eager_2
  run 100 python benchmarks/perf/vi_step.py $S --method vi --compile --name vi_step_gpu_vi_f64_compiled
  echo "== $(date +%T) done"; exit
fi
run 120 python benchmarks/device/device_check.py --device cuda --out device_check_gpu_2
run 90 python benchmarks/perf/vi_step.py $S --method vi --name vi_step_gpu_vi_f64_eager
run 180 python benchmarks/perf/vi_step.py $S --method vi --compile --compile-mode reduce-overhead --name vi_step_gpu_vi_f64_graphs
run 90 python benchmarks/perf/vi_step.py $S --method sep --name vi_step_gpu_sep_f64_eager
run 180 python benchmarks/perf/vi_step.py $S --method sep --compile --compile-mode reduce-overhead --name vi_step_gpu_sep_f64_graphs
run 180 python benchmarks/perf/vi_step.py $S --method vi --dtype float32 --compile --compile-mode reduce-overhead --name vi_step_gpu_vi_f32_graphs
run 90 python benchmarks/perf/vi_step.py $S --method vi --dtype float32 --name vi_step_gpu_vi_f32_eager
run 120 python benchmarks/perf/peers_throughput.py --device cuda --dtype float64 --budget 10 --sets mnist-200 --libs sgpc gpytorch \
    --methods vi sep --name peers_throughput_gpu64_2
echo "== $(date +%T) done"
