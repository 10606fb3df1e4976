#!/usr/bin/env bash
# Run GPU tests and benchmarks on a machine with torch + triton but without this package
# installed (the lent H200): PYTHONPATH=<checkout> is enough (draftsmith/__init__.py maps the
# top-level folders into the package).
# Usage: lab/gpu_session.sh <out-dir> <step>...   steps: tests-kernel, tests-core, tests-host, tests-gpu, variants,
# attention, attention-triton (ATTN_ARGS: more flags), phases (PHASES_ARGS), merge, ceiling, ncu, draft-profile, draft,
# patches (PATCHES, BATCHES, AB_ARGS: bench/variants' kernels timed beside today's), tests-patched (PATCH, KSEL)   (env SMI=1: sample clocks/power into smi.csv)
set -u
OUT=${1:?out dir}; shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
export PYTHONPATH="$ROOT:$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
if [ -n "${SMI:-}" ]; then  # sample SM clock, power and temperature every 100 ms into $OUT/smi.csv
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 100 > "$OUT/smi.csv" 2>&1 &
  trap "kill $! 2>/dev/null" EXIT
fi
for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    tests-kernel) timeout 400 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_window_block.py \
                    -k "${KSEL:-minimax or cuda_graph}" 2>&1 | tail -15 ;;
    tests-core) timeout 500 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_window_block.py \
                  tests/test_fused_host_kernels.py tests/test_host.py 2>&1 | tail -25 ;;
    tests-host) timeout 400 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/test_fused_host_kernels.py \
                  tests/test_host.py 2>&1 | tail -15 ;;
    tests-gpu) timeout 500 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tail -15 ;;
    variants) timeout 400 python3 bench/attention.py --variants --only-triton --no-flex \
                --batches "${BATCHES:-1,16,64,256}" ${TRIALS:+--trials "$TRIALS"} --log "$OUT/variants.jsonl" >> "$OUT/variants.txt" 2>&1
              tail -8 "$OUT/variants.txt"; grep '"best"' "$OUT/variants.txt" ;;
    attention) timeout 500 python3 bench/attention.py --log "$OUT/attention.jsonl" > "$OUT/attention.txt" 2>&1
               tail -20 "$OUT/attention.txt" ;;
    phases) timeout 400 python3 lab/kernel_phases.py ${PHASES_ARGS:-} > "$OUT/phases.txt" 2>&1; cat "$OUT/phases.txt" ;;
    merge) timeout 300 python3 lab/split_merge.py > "$OUT/split_merge.txt" 2>&1; cat "$OUT/split_merge.txt" ;;
    ceiling) timeout 120 python3 bench/read_ceiling.py 2>&1 | tail -3 ;;
    attention-triton) L=${LAYOUT:-nhd}; timeout 300 python3 bench/attention.py --only-triton --no-flex \
                        --batches "${BATCHES:-1,64,256}" --layout $L ${ATTN_ARGS:-} --log "$OUT/attention_triton_${L}_$(date +%H%M%S).jsonl" \
                        >> "$OUT/attention_triton_$L.txt" 2>&1
                      tail -7 "$OUT/attention_triton_$L.txt" ;;
    ncu) if command -v ncu > /dev/null; then
           timeout 300 ncu --kernel-name regex:"_attn_kernel|gluon_window_block_kernel" --launch-skip 3 --launch-count 1 --section SpeedOfLight \
             --section MemoryWorkloadAnalysis ${NCU_MORE:+--section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats} python3 bench/attention.py --only-triton --no-flex --batches 64 \
             > "$OUT/ncu.txt" 2>&1; grep -v '^{' "$OUT/ncu.txt" | tail -${NCU_LINES:-60}
         else echo "no ncu on this machine"; ls /usr/local/cuda*/bin 2>/dev/null | head; fi ;;
    draft-profile) timeout 400 python3 bench/draft_step.py --batches ${DRAFT_BATCHES:-64} --profile --gaps \
                     > "$OUT/draft_profile.txt" 2>&1; tail -40 "$OUT/draft_profile.txt" ;;
    draft) timeout 400 python3 bench/draft_step.py --batches ${DRAFT_BATCHES:-1 16 64} --iters ${DRAFT_ITERS:-20} >> "$OUT/draft.txt" 2>&1
           tail -12 "$OUT/draft.txt" ;;
    patches) # each kernel variant of bench/variants (PATCHES: which) as a file beside today's kernel, timed by gluon_ab
             cp lowering/gluon_window_block.py "$OUT/ab_main.py"; against="$OUT/ab_main.py"
             for p in ${PATCHES:-bench/variants/*.patch}; do
               n=$(basename "$p" .patch)
               if patch -s -o "$OUT/ab_$n.py" lowering/gluon_window_block.py "$p" > /dev/null 2>&1; then against="$against,$OUT/ab_$n.py"
               else echo "$p does not apply to today's kernel file alone (its header says how to run it)"; rm -f "$OUT/ab_$n.py" "$OUT/ab_$n.py.rej"; fi
             done
             (timeout 500 python3 lab/gluon_ab.py --builds "" --against "$against" --batches "${BATCHES:-33,64,256,16,1}" \
               ${AB_ARGS:-}) > "$OUT/patches.txt" 2>&1; grep "^batch [0-9]*:\|Error" "$OUT/patches.txt" ;;
    tests-patched) # the Gluon GPU tests with PATCH applied in place, reverted after (for the device machine's copy of the tree)
             patch -s -p0 < "${PATCH:?PATCH=bench/variants/....patch}" || { echo "$PATCH does not apply"; continue; }
             timeout 500 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/test_triton_window_block.py \
               -k "${KSEL:-gluon or persistent}" 2>&1 | tail -15
             patch -s -R -p0 < "$PATCH" ;;
    *) echo "unknown step $step" ;;
  esac
done
