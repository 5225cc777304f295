#!/bin/bash
# Issue 4 on a lent GPU machine: satimage Figure-1 cells (M = 10 % of N unless FRACTION says otherwise, 500
# iterations) taken from one queue by GPU workers and CPU workers at once, one fit per process, until a deadline.
# From the repository root, with the data sets in .devdata (docs/results-scale.md):
#   SGPC_COMMIT=<commit> bash benchmarks/device/device_alpha.sh DEADLINE_S GPU_WORKERS CPU_WORKERS [FIRST_SPLIT]
# Each cell writes results/alpha_dev/s<split>_<method>_<alpha>_<device>.json after its fit (the file's meta names
# the torch and the machine); the folder is packed into $OUT/alpha_dev.tgz every 15 s, so a run cut off keeps the
# cells it finished; a cell whose file is there already is skipped, so a second run goes on where the first stopped.
# Split FIRST_SPLIT (default 1) queues FIRST_METHODS (default ARPEP and RPAPEP: split 1's PEP and APEP ran on the
# 2-core CPU machine), the splits after it all four methods; SPLITS (default 4) is how many splits are queued, so
# SPLITS=1 finishes one split and does not start the next. TAG replaces the device in the file names (cpu2
# for the 2-core machine); FRACTION (default 0.1) and DIR (default alpha_dev) run another M into another folder of
# results/, e.g. FRACTION=0.2 DIR=alpha_dev_m20; ITERS and SET override the fit for a smoke test.
# A worker starts no fit with less than MIN_LEFT seconds (default 30) to the deadline: a fit cut off is lost, so
# set it to about one fit's time (MIN_LEFT=480 for satimage at M = 20% on one CPU core).
# The GPU is time-shared between the workers: at M = 20 % a satimage fit took 344-364 s with 10 GPU workers and
# 81-106 s with 3 (27-36 s of GPU time a fit either way), so 3 workers do as much and lose less at the deadline.
# On an H200 (2026-11-27) 3 GPU workers took 102-120 s an APEP fit and 84-98 s an ARPEP fit (about 125 s a cell
# with start-up), while 4 CPU workers beside them took 435-520 s a PEP fit (that call ran them as a second instance
# of this script). One instance does it now, sharing one set of claims: CPU_FIRST (e.g. "pep") gives the CPU workers
# the first split's cells of those methods before the rest, and CPU_MIN_LEFT (default MIN_LEFT) is their MIN_LEFT,
# e.g. CPU_FIRST=pep CPU_MIN_LEFT=400 MIN_LEFT=100 ... 540 3 4 3.
# Carry only .devdata/datasets/uci and MANIFEST.md: the whole folder and the working tree pass the 64 MiB limit.
export SGPC_DATA=${SGPC_DATA:-$PWD/.devdata/datasets} PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
deadline=$(( $(date +%s) + $1 )); gpu=$2; cpu=$3; first=${4:-1}; iters=${ITERS:-500}; set=${SET:-satimage}
out=${OUT:-/tmp}; claims=$(mktemp -d)
frac=${FRACTION:-0.1}; dir=${DIR:-alpha_dev}
mkdir -p results/$dir
alphas="0.001 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.0"
cells=()
for s in $(seq $first $((first + ${SPLITS:-4} - 1))); do
  methods="apep arpep rpapep pep"; [ $s = $first ] && methods=${FIRST_METHODS:-arpep rpapep}   # the slowest method first
  for m in $methods; do for a in $alphas; do cells+=("${s}_${m}_${a}"); done; done
done
cpu_cells=()   # CPU_FIRST's cells of the first split, then the whole queue (claimed cells are skipped)
for c in "${cells[@]}"; do
  read -r s m a <<< "${c//_/ }"; [ $s = $first ] && [[ " $CPU_FIRST " == *" $m "* ]] && cpu_cells+=("$c")
done
cpu_cells+=("${cells[@]}")
worker() {   # $1: cuda or cpu, $2: worker number
  local min=${MIN_LEFT:-30} queue=("${cells[@]}")
  [ $1 = cpu ] && min=${CPU_MIN_LEFT:-$min} && queue=("${cpu_cells[@]}")
  for c in "${queue[@]}"; do
    left=$(( deadline - $(date +%s) )); [ $left -gt $min ] || break
    read -r s m a <<< "${c//_/ }"
    ls results/$dir/s${s}_${m}_${a}_*.json > /dev/null 2>&1 && continue
    mkdir "$claims/$c" 2>/dev/null || continue
    echo "== $(date +%T) $1 worker $2: split $s $m alpha $a" >> "$out/log_$1_$2.txt"
    timeout $left python benchmarks/paper/alpha_uci.py --sets $set --fractions $frac --splits 1 --first-split $s \
        --methods $m --alphas $a --iters $iters --device $1 --threads 1 --out "$dir/s${s}_${m}_${a}_${TAG:-$1}" \
        >> "$out/log_$1_$2.txt" 2>&1
  done
}
pack() { tar czf "$out/$dir.part" results/$dir && mv "$out/$dir.part" "$out/$dir.tgz"; }
( while sleep 15; do pack; done ) & packer=$!
for i in $(seq 1 $gpu); do worker cuda $i & done
for i in $(seq 1 $cpu); do worker cpu $i & done
wait $(jobs -p | grep -v "^$packer$")
kill $packer; pack
echo "== $(date +%T) done: $(ls results/$dir | wc -l) cells"
