#!/usr/bin/env bash
# Run GPU tests and benchmarks on a machine with torch + triton but without this package
# installed (the lent H200): PYTHONPATH=<checkout> is enough (draftsmith/__init__.py maps the
# top-level folders into the package).
# Usage: lab/gpu_session.sh <out-dir> <step>...   steps: after-kernel-edit (the GPU tests of the kernel and
# lab, then the attention bench at head dims 128, 64 and 256), tp-shapes (issue 35 item 4 in one call of at most
# TP_BUDGET=530 s: every GPU test of the kernel, emit, lowering and host files and the ptxas check, in parallel
# shards, then the attention bench at TP 1/2/4/8 on 32-token pages and the dense arena beside FA4; FA4 from the
# wheels of lab/fa4_wheels.sh found under .whl/ (any subfolders; parts carried in earlier calls stay there while
# the machine is warm) or an FA4_SITE already installed), fa4-stage (only copy .whl/ aside), tests-kernel, tests-core, tests-host, tests-gpu,
# tests-lab (LAB_TESTS, LAB_K, LAB_SHARDS), variants, attention, attention-triton (ATTN_ARGS: more flags), phases (PHASES_ARGS), merge, ceiling,
# ncu, draft-profile, draft, ab (AGAINST: kernel .py files or revisions, BATCHES, AB_ARGS);
# issue 45 point 3: stage (STAGE=dir: wheels, cu13 parts, site.tar.xz, trtllm_src), capture-tests, kinds-bench,
# kinds-ab (AGAINST: kernel files, NUM_BUFS, KINDS, BATCHES, PAGE_ORDER=shared: K/V in L2, NO_FA4=1: without FA4); variant-copy (VARIANT, DEST: a variant on the kernel it names); variant-ab (VARIANT: a lab/variants patch, KINDS,
# BATCHES, ROUNDS, PHASES_KINDS (" ": none): kinds-ab against it, then its phases); ncu-ab (KIND, BATCH: Nsight
# Compute on today's kernel and FA4, clocks left alone); ncu-stalls (KINDS, BATCH, AGAINST: stall reasons with K/V in L2); ncu-source (KIND, BATCH, AGAINST: per-SASS-instruction stall samples); windows-ab (AGAINST, KINDS, BATCHES, WINDOWS: a cost a 64 keys and a program, lab/window_split.py); wide-copy (WIDE, WIDE_CHAIN: /tmp/ab_wide.py, the wide build on); power (KINDS, BATCHES, AGAINST: lab/power_clock.py beside FA4); require-h200 (exit 3 on any
# other card, so that the steps after it only run on an H200); pack (last: $OUT's files but smi.csv in one out.tar.xz) (env SMI=1: sample clocks/power into smi.csv)
set -u
OUT=${1:?out dir}; shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
# The record that this session found $OUT empty: only then may pack archive and remove its files.
[ -z "$(ls -A "$OUT")" ] && echo "lab/gpu_session.sh found this folder empty" > "$OUT/.gpu_session_out"
export PYTHONPATH="$ROOT:$ROOT/tests:$ROOT/bench:$ROOT/lab${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
if [ -n "${SMI:-}" ]; then  # sample SM clock, power and temperature every 100 ms into $OUT/smi.csv
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 100 > "$OUT/smi.csv" 2>&1 &
  trap "kill $! 2>/dev/null" EXIT
fi
use_devsite() {  # the package's own deps (pydantic, omegaconf, re2, ...) from the staged site.tar.xz, after the image's
  if ! python3 -c "import pydantic, omegaconf, re2, yaml, safetensors" 2>/dev/null && [ -f /tmp/fa4w/site.tar.xz ]; then
    mkdir -p /tmp/devsite && tar -C /tmp/devsite -xJf /tmp/fa4w/site.tar.xz
    # the image's own copies win (PYTHONPATH would put the archive's first: its huggingface_hub 2.x breaks the
    # image's transformers at import)
    for m in huggingface_hub safetensors tqdm yaml; do
      if python3 -c "import $m" 2>/dev/null; then rm -rf /tmp/devsite/$m /tmp/devsite/${m}-*.dist-info; fi; done
    [ -d /tmp/devsite/yaml ] || rm -rf /tmp/devsite/_yaml /tmp/devsite/PyYAML-*.dist-info; fi
  export PYTHONPATH="$PYTHONPATH:/tmp/devsite"
}
use_fa4() {  # FA4 installed into /tmp/fa4site from the parts the stage step put in /tmp/fa4w, unless it imports
  # already ($1: the modules to import, default FA4's interface)
  if ! PYTHONPATH="/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages" python3 -c "import ${1:-flash_attn.cute.interface}" \
      2>/dev/null; then
    timeout 120 bash lab/fa4_wheels.sh install /tmp/fa4w /tmp/fa4site > "$OUT/fa4_install.txt" 2>&1; echo "fa4 install: exit $?"
    tail -2 "$OUT/fa4_install.txt"; fi
}
variant_copy() {  # $1 <- VARIANT=lab/variants/X.patch applied after the variants its header names it on top of,
  # on the kernel its Kernel: line names (lab/.kernels/, carried, where that is not today's); sets chain (the patches,
  # first first)
  python3 lab/timed_kernel.py --variant "${VARIANT:?VARIANT=lab/variants/X.patch}" --write "$1" || return 1
  chain=$(python3 -c 'import sys, timed_kernel; print(*timed_kernel.chain(sys.argv[1]))' "$VARIANT") || return 1
}
ncu_both() {  # Nsight Compute on the first launch of ours and of FA4, each in its own lab/gluon_ab.py run at kind $1,
  # batch $2 (--fa4, 32-token pages): $3 the output files' tag ($OUT/<tag>_<ours|fa4>_<kind>_<batch>.txt), $4 ncu's
  # options, then lab/gluon_ab.py's own arguments, last the lines to show (a grep -E pattern); clocks left alone
  # (METHOD.md); FA4 from the stage step's parts; NCU_REP=1: also each kernel's SASS source page with its warp
  # stall samples ($OUT/<tag>_<ours|fa4>_<kind>_<batch>_sass.csv.xz, for lab/ncu_sass.py)
  local k=$1 n=$2 tag=$3 opts=$4 site=/tmp/fa4site; shift 4
  local show=${*: -1}; set -- "${@:1:$#-1}"
  use_fa4
  if ! command -v ncu > /dev/null; then echo "no ncu on this machine"; return; fi
  for pair in "ours:gluon_window_block_kernel" "fa4:FlashAttentionForwardSm90"; do
    local f="$OUT/${tag}_${pair%%:*}_${k}_$n.txt"
    PYTHONPATH="$site:$site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH" timeout ${NCU_S:-200} ncu --clock-control none \
      --kernel-name regex:"${pair#*:}" --launch-count 1 $opts ${NCU_REP:+-o "${f%.txt}"} python3 lab/gluon_ab.py --kind $k --layout trtllm --page 32 \
      --batches $n --builds "" --fa4 --rounds 1 "$@" > "$f" 2>&1
    echo "--- $tag ${pair%%:*} $k $n: exit $?"
    if [ -n "${NCU_REP:-}" ]; then  # the report's source page: every SASS instruction with its stall samples
      ncu -i "${f%.txt}.ncu-rep" --page source --csv --print-source sass > "${f%.txt}_sass.csv" 2>&1
      rm -f "${f%.txt}.ncu-rep"; wc -l < "${f%.txt}_sass.csv"; xz -f "${f%.txt}_sass.csv"; fi  # read: lab/ncu_sass.py
    grep -E "$show" "$f" | awk '$0 !~ /stalled/ || $NF + 0 >= 0.05' \
      | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -${NCU_LINES:-30}
  done
}
for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    tests-kernel) timeout 400 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/lowering/test_triton_window_block.py \
                    -k "${KSEL:-minimax or cuda_graph}" 2>&1 | tail -15 ;;
    tests-core) timeout 500 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/lowering/test_triton_window_block.py \
                  tests/runtime/test_fused_host_kernels.py tests/runtime/test_host.py 2>&1 | tail -25 ;;
    tests-host) timeout 400 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/runtime/test_fused_host_kernels.py \
                  tests/runtime/test_host.py 2>&1 | tail -15 ;;
    tests-gpu) timeout 500 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tail -15 ;;
    tests-lab) use_devsite  # LAB_TESTS: which (default every lab test), LAB_K: a -k expression, LAB_SHARDS=n: n pytest
      # processes (lab/pytest_shard.py) compiling on the machine's cores at once; deps from the stage step
      n=${LAB_SHARDS:-1}
      for i in $(seq 0 $((n - 1))); do
        OMP_NUM_THREADS=2 PYTEST_SHARD=$i/$n timeout ${TESTS_S:-300} python3 -P -m pytest -q -p no:cacheprovider -p pytest_shard \
          ${LAB_K:+-k "$LAB_K"} ${LAB_TESTS:-lab/tests} > "$OUT/tests_lab_$i.txt" 2>&1 &
      done
      wait
      for i in $(seq 0 $((n - 1))); do grep -E "^(FAILED|ERROR)" "$OUT/tests_lab_$i.txt" | head -10; tail -1 "$OUT/tests_lab_$i.txt"; done ;;
    after-kernel-edit) # what a change to lowering/gluon_window_block.py must pass on the H200
             timeout 540 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/lowering/test_triton_window_block.py \
               2>&1 | tail -15
             timeout 300 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/lowering/test_lowerings.py \
               tests/runtime/test_fused_host_kernels.py tests/runtime/test_host.py lab/tests/test_gluon_ptxas.py lab/tests/test_timed_kernel.py 2>&1 | tail -15
             for d in 128 64 256; do
               timeout 300 python3 bench/attention.py --head-dim $d --only-triton --no-flex \
                 --log "$OUT/attention_d$d.jsonl" > "$OUT/attention_d$d.txt" 2>&1; tail -8 "$OUT/attention_d$d.txt"
             done ;;
    stage) # copy every file under $STAGE (wheels, cu13 parts, site.tar.xz) into /tmp/fa4w, where later steps and
           # later calls on the same warm machine find them; a trtllm_src folder there becomes DRAFTSMITH_TRTLLM_SRC
      mkdir -p /tmp/fa4w; find "${STAGE:?STAGE=dir}" -maxdepth 1 -type f -exec cp -n {} /tmp/fa4w/ \;
      [ -d "$STAGE/trtllm_src" ] && rm -rf /tmp/trtllm_src && cp -r "$STAGE/trtllm_src" /tmp/trtllm_src
      ls /tmp/fa4w | tr '\n' ' '; echo ;;
    capture-tests) # issue 45 point 3: the CUDA-graph capture of every adapter's emitted forward, every lowering's GPU
      # tests and the kernel's, in parallel processes, each bounded (deps and excerpts from the stage step)
      t0=$(date +%s)
      use_devsite
      [ -d /tmp/trtllm_src ] && export DRAFTSMITH_TRTLLM_SRC=/tmp/trtllm_src
      echo "TensorRT-LLM excerpts: ${DRAFTSMITH_TRTLLM_SRC:-none (the emitted-forward tests skip)}"
      pyt="timeout ${TESTS_S:-300} python3 -P -m pytest -q -rs -p no:cacheprovider -p pytest_shard"
      OMP_NUM_THREADS=2 $pyt -m gpu tests/emit/test_emit_capture_every_adapter.py tests/emit/test_emit_runtime.py \
        tests/emit/test_emit_dense_arena.py > "$OUT/tests_capture.txt" 2>&1 &
      OMP_NUM_THREADS=2 $pyt -m gpu tests/lowering/test_lowerings.py tests/lowering/test_lowering_capture_safe.py \
        > "$OUT/tests_lowerings.txt" 2>&1 &
      for i in 0 1 2 3; do
        OMP_NUM_THREADS=2 PYTEST_SHARD=$i/4 $pyt -m gpu tests/lowering/test_triton_window_block.py > "$OUT/tests_kernel_$i.txt" 2>&1 &
      done
      wait
      for f in "$OUT"/tests_*.txt; do echo "--- $(basename "$f")"; grep -E "^(FAILED|ERROR)" "$f" | head -20; tail -2 "$f"; done
      echo "=== capture-tests done after $(( $(date +%s) - t0 )) s" ;;
    kinds-bench) # issue 45 point 3: every drafter kind's shape (bench/attention.py KINDS) beside FA4, TensorRT-LLM's
      # paged pool on 32-token pages; FA4 installed from the parts staged in /tmp/fa4w (this call's and earlier ones)
      t0=$(date +%s); site=/tmp/fa4site
      use_fa4
      for k in ${KINDS:-dspark_minimax dflash2_minimax dflash_w2048 dflash_full dspark_full}; do
        left=$(( ${KINDS_BUDGET:-540} - ($(date +%s) - t0) )); [ $left -lt 30 ] && { echo "out of time before $k"; break; }
        PYTHONPATH="$site:$site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH" timeout $left python3 bench/attention.py \
          --kind $k --only-triton --no-flex --layout trtllm --page 32 --batches "${BATCHES:-1,16,64,256}" \
          --log "$OUT/kind_$k.jsonl" > "$OUT/kind_$k.txt" 2>&1
        echo "--- $k: exit $?"; grep -v '^{' "$OUT/kind_$k.txt" | grep -E "^\||batch [0-9]+: triton_window_block .* FlashAttention|^ ?[a-z0-9_]* ?TP" | head -14
        grep '"error"' "$OUT/kind_$k.txt" | head -3
      done
      echo "=== kinds-bench done after $(( $(date +%s) - t0 )) s" ;;
    kinds-ab) # issue 45 point 3: kernel files (AGAINST, e.g. lowering/gluon_window_block.py and a patched copy) at each
      # drafter kind's shape on TensorRT-LLM's 32-token pages, alternated with FA4 in one process a kind (lab/gluon_ab.py
      # --kind --fa4); NUM_BUFS=4,5: each kernel per ring-slot count; AB_BUILDS: today's kernel's builds too (gluon_ab
      # --builds, e.g. overlap+pingpong,pingpong). FA4 from the stage step's parts, as kinds-bench; NO_FA4=1: without
      # FA4 (one call, nothing staged; it also compiles the kernels for a later call on the same warm machine).
      t0=$(date +%s); site=/tmp/fa4site; fa4=--fa4
      if [ -n "${NO_FA4:-}" ]; then fa4=; else use_fa4; fi
      for k in ${KINDS:-dspark_minimax dflash2_minimax dflash_w2048}; do
        left=$(( ${KINDS_BUDGET:-540} - ($(date +%s) - t0) )); [ $left -lt 30 ] && { echo "out of time before $k"; break; }
        echo "--- $k from $(date -u +%H:%M:%S) (matches smi.csv's timestamps)"; log="$OUT/ab_$k${NO_FA4:+_nofa4}.txt"
        PYTHONPATH="$site:$site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH" timeout $left python3 lab/gluon_ab.py \
          --kind $k --layout trtllm --page 32 --batches "${BATCHES:-16,64,256}" --builds "${AB_BUILDS:-}" \
          --page-order "${PAGE_ORDER:-random}" \
          --against "${AGAINST:-lowering/gluon_window_block.py}" ${NUM_BUFS:+--num-bufs "$NUM_BUFS"} $fa4 \
          --rounds "${ROUNDS:-2}" > "$log" 2>&1
        echo "--- $k: exit $?"; grep -E "^shape|^batch [0-9]+( FA4 / run)?:|WRONG|Error|--fa4" "$log" | head -12
      done
      echo "=== kinds-ab done after $(( $(date +%s) - t0 )) s" ;;
    variant-copy) # DEST (default /tmp/ab_variant.py): VARIANT after its chain, on the kernel it names (variant_copy), for AGAINST
      variant_copy "${DEST:=/tmp/ab_variant.py}" || exit 1 ;;
    variant-ab) # a kernel variant (VARIANT=lab/variants/X.patch) against today's kernel: the kinds-ab step (FA4 beside
      # where staged), then the variant's phases under the timer at PHASES_KINDS' batch 16
      variant_copy /tmp/ab_variant.py || exit 1
      # SMI unset: this step's sampler covers the nested one (a second would truncate smi.csv)
      SMI= AGAINST=lowering/gluon_window_block.py,/tmp/ab_variant.py BATCHES=${BATCHES:-1,16,64,256} bash "$0" "$OUT" kinds-ab
      for k in ${PHASES_KINDS:-dflash2_minimax}; do
        timeout 100 python3 lab/kernel_phases.py --kind $k --layout trtllm --page 32 --batches 16 \
          $(for v in $chain; do echo --variant $v; done) > "$OUT/phases_$k.txt" 2>&1; echo "--- phases $k: exit $?"; grep -E "Q in registers|first ring tile|replay" "$OUT/phases_$k.txt"
      done ;;
    power) # lab/power_clock.py at KINDS' shapes (BATCHES), today's kernel beside FA4 (and AGAINST kernel files), each
      # replayed back to back while NVML reads clock, power and energy; FA4 and nvidia-ml-py from the stage step's parts
      site=/tmp/fa4site
      use_fa4 "flash_attn.cute.interface, pynvml"
      for k in ${KINDS:-dflash2_minimax dspark_minimax dflash_w2048}; do
        PYTHONPATH="$site:$site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH" timeout ${POWER_S:-150} python3 lab/power_clock.py \
          --kind $k --batches "${BATCHES:-64,256}" --fa4 ${AGAINST:+--against "$AGAINST"} > "$OUT/power_$k.txt" 2>&1
        echo "--- power $k: exit $?"; grep "^batch" "$OUT/power_$k.txt"
      done ;;
    ncu-stalls) # the warps' stall reasons (Nsight Compute, per issued instruction) of today's kernel (AGAINST: kernel
      # files instead) and FA4, with K/V in L2 (--page-order shared), at KINDS' shapes, BATCH (64): where two consumer
      # warpgroups lose cycles that one does not (lab/log.md#a33)
      for k in ${KINDS:-dflash2_minimax dflash_w2048}; do
        ncu_both $k ${BATCH:-64} stalls "--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" \
          --page-order shared --against "${AGAINST:-lowering/gluon_window_block.py}" \
          "stalled|inst_executed|cycles_elapsed|issue_active|tensor_op"
      done ;;
    wide-copy) # /tmp/ab_wide.py: today's kernel with wide-ring.patch (and WIDE_CHAIN: patches on top of it), the wide
      # build on by default and WIDE ("WIDE_KV WIDE_Q_SMEM" unless set) switched on (lab/wide_copy.py), for AGAINST
      python3 -c 'import sys, timed_kernel; open("/tmp/ab_wide0.py", "w").write(timed_kernel.variant_source(sys.argv[1:])[0])' \
        lab/variants/wide-ring.patch ${WIDE_CHAIN:-} || exit 1
      python3 lab/wide_copy.py /tmp/ab_wide0.py /tmp/ab_wide.py ${WIDE-WIDE_KV WIDE_Q_SMEM} || exit 1
      echo "/tmp/ab_wide.py: wide-ring.patch ${WIDE_CHAIN:-} + ${WIDE-WIDE_KV WIDE_Q_SMEM}" ;;
    windows-ab) # kernel files (AGAINST) at two windows (WINDOWS, default "4096 1024") with K/V in L2 (PAGE_ORDER,
      # default shared) at KINDS' shapes and BATCHES, then lab/window_split.py: each kernel's cost a 64 keys and a
      # program (lab/log.md#a33's method); FA4 beside when staged (FA4=1)
      set -- ${WINDOWS:-4096 1024}; site=/tmp/fa4site; [ -n "${FA4:-}" ] && use_fa4
      for k in ${KINDS:-dflash2_minimax dspark_minimax}; do
        for w in "$@"; do
          PYTHONPATH="$site:$site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH" timeout ${WINDOW_S:-150} python3 lab/gluon_ab.py \
            --kind $k --window $w --page-order "${PAGE_ORDER:-shared}" --layout trtllm --page 32 --batches "${BATCHES:-64}" \
            --builds "" --against "${AGAINST:-lowering/gluon_window_block.py}" --rounds ${ROUNDS:-2} ${FA4:+--fa4} \
            > "$OUT/windows_${k}_$w.txt" 2>&1 || echo "--- $k window $w: exit $?"
          grep -E "WRONG|rror" "$OUT/windows_${k}_$w.txt" | head -3
        done
        echo "--- $k"; python3 lab/window_split.py "$OUT/windows_${k}_$1.txt" "$OUT/windows_${k}_$2.txt"
      done ;;
    ncu-source) # where in the SASS the warps stall (Nsight Compute's warp-state sampling, a CSV of every instruction),
      # ours (AGAINST: a kernel file instead) and FA4 at KIND, BATCH with K/V in L2 (--page-order shared)
      NCU_REP=1 ncu_both ${KIND:-dflash2_minimax} ${BATCH:-64} source "--section SourceCounters --section WarpStateStats" \
        --page-order shared --against "${AGAINST:-lowering/gluon_window_block.py}" "^ +(Warp Cycles Per Issued|Duration)" ;;
    ncu-ab) # Nsight Compute on today's kernel and FA4 at one drafter kind and batch (KIND, BATCH)
      ncu_both ${KIND:-dflash2_minimax} ${BATCH:-64} ncu "--section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy" \
        --against lowering/gluon_window_block.py \
        "^ +(SM Frequency|Duration|Memory Throughput|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued)" ;;
    require-h200) # stop here (exit 3) unless the card is an H200: the steps after it are H200 measurements
      name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
      case $name in *H200*) ;; *) echo "not an H200: the later steps are not run"; exit 3 ;; esac ;;
    pack) # every file under $OUT into $OUT/out.tar.xz (the device returns at most 8 files a call), put last;
      # only where this session found $OUT empty (its record), never a folder that held other files
      if [ ! -f "$OUT/.gpu_session_out" ]; then echo "pack: $OUT held files before this session: not packed"; continue; fi
      list=$(mktemp)
      (cd "$OUT" && find . -type f ! -name out.tar.xz ! -name smi.csv ! -name .gpu_session_out | sed 's|^\./||' > "$list" \
        && tar -cJf out.tar.xz -T "$list" && xargs -d '\n' -a "$list" rm -f -- && rm -f .gpu_session_out \
        && find . -mindepth 1 -type d -empty -delete)
      echo "packed $(wc -l < "$list") files into out.tar.xz"; rm -f "$list" ;;
    fa4-stage) mkdir -p /tmp/fa4w; find .whl -type f -exec cp -n {} /tmp/fa4w/ \; 2>/dev/null; ls /tmp/fa4w ;;
    tp-shapes) # issue 35 item 4: per-rank shapes, correct and timed beside FA4, in one call
      t0=$(date +%s); budget=${TP_BUDGET:-530}; shards=${SHARDS:-5}
      site=${FA4_SITE:-/tmp/fa4site}; mkdir -p /tmp/fa4w
      find .whl -type f ! -name site.tar.xz -exec cp -n {} /tmp/fa4w/ \; 2>/dev/null
      if ! PYTHONPATH="$site:$site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH" python3 -c "import flash_attn.cute.interface" \
          2>/dev/null; then
        if ls /tmp/fa4w/cu13.part.aa /tmp/fa4w/cu13.part.ab /tmp/fa4w/flash_attn_4-*.whl > /dev/null 2>&1; then
          timeout 120 bash lab/fa4_wheels.sh install /tmp/fa4w "$site" > "$OUT/fa4_install.txt" 2>&1
          echo "fa4 install: exit $?"; tail -3 "$OUT/fa4_install.txt"
        else echo "FA4 wheels incomplete in .whl/ (have: $(ls /tmp/fa4w | tr '\n' ' ')): the bench runs without FA4"; fi
      fi
      fa4path="$site:$site/nvidia_cutlass_dsl/dsl_packages"
      # draftsmith's own dependencies (tests/conftest.py imports the framework): lab/gpu_deps.sh's archive
      if ! python3 -c "import pydantic, omegaconf, re2, yaml, safetensors" 2>/dev/null; then
        deps=$(find .whl /tmp/fa4w -name site.tar.xz 2>/dev/null | head -1)
        if [ -n "$deps" ]; then mkdir -p /tmp/devsite && tar -C /tmp/devsite -xJf "$deps"
          export PYTHONPATH="$PYTHONPATH:/tmp/devsite"; echo "deps from $deps"
        else echo "no pydantic here and no .whl/**/site.tar.xz (lab/gpu_deps.sh download .whl/deps): tests fail at conftest"; fi
      fi
      # TensorRT-LLM's excerpts (the emitted forward's CUDA-graph test needs them): carried as .whl/trtllm_src
      for src in "${DRAFTSMITH_TRTLLM_SRC:-}" .whl/trtllm_src shared/trtllm_src; do
        if [ -n "$src" ] && [ -d "$src" ]; then export DRAFTSMITH_TRTLLM_SRC=$(cd "$src" && pwd); break; fi; done
      echo "TensorRT-LLM excerpts: ${DRAFTSMITH_TRTLLM_SRC:-none (the CUDA-graph test of the emitted forward skips)}"
      # The tests, in parallel processes (contiguous shards of the kernel file: lab/pytest_shard.py); each bounded.
      tests_s=${TESTS_S:-300}
      pyt="timeout $tests_s python3 -P -m pytest -q -rs -p no:cacheprovider -p pytest_shard"
      for i in $(seq 0 $((shards - 1))); do
        OMP_NUM_THREADS=2 PYTEST_SHARD=$i/$shards $pyt -m gpu tests/lowering/test_triton_window_block.py \
          > "$OUT/tests_kernel_$i.txt" 2>&1 &
      done
      OMP_NUM_THREADS=2 $pyt -m gpu tests/test_emit*.py > "$OUT/tests_emit.txt" 2>&1 &
      OMP_NUM_THREADS=2 $pyt -m gpu tests/lowering/test_lowerings.py tests/runtime/test_fused_host_kernels.py tests/runtime/test_host.py \
        > "$OUT/tests_host.txt" 2>&1 &
      OMP_NUM_THREADS=2 $pyt lab/tests/test_gluon_ptxas.py > "$OUT/tests_ptxas.txt" 2>&1 &
      wait
      for f in "$OUT"/tests_*.txt; do echo "--- $(basename "$f") (124 in it = cut by the ${tests_s} s bound)"
        grep -E "^(FAILED|ERROR)" "$f" | head -20; tail -2 "$f"; done
      echo "=== tests done after $(( $(date +%s) - t0 )) s"
      left=$(( budget - ($(date +%s) - t0) )); [ $left -lt 60 ] && left=60
      PYTHONPATH="$fa4path:$PYTHONPATH" timeout $left python3 bench/attention.py --only-triton --no-flex --tp 1,2,4,8 \
        --layout trtllm,arena --page 32 --batches "${BATCHES:-1,16,64,256}" ${ATTN_ARGS:-} --log "$OUT/tp_shapes.jsonl" \
        > "$OUT/tp_shapes.txt" 2>&1
      echo "bench: exit $? (124: cut at ${left} s; every finished (tp, pool) table is above)"
      grep -v '^{' "$OUT/tp_shapes.txt" | tail -90
      grep '"error"' "$OUT/tp_shapes.txt" | head -5
      echo "=== tp-shapes done after $(( $(date +%s) - t0 )) s" ;;
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
    ab) # kernels as .py files (or git revisions) timed beside today's by lab/gluon_ab.py
             timeout 500 python3 lab/gluon_ab.py --builds "" --against "${AGAINST:?AGAINST=a.py,b.py}" \
               --batches "${BATCHES:-33,64,256,16,1}" ${AB_ARGS:-} > "$OUT/ab.txt" 2>&1; grep "^batch [0-9]*:\|Error" "$OUT/ab.txt" ;;
    *) echo "unknown step $step" ;;
  esac
done
