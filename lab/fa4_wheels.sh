#!/usr/bin/env bash
# FlashAttention-4 for bench/attention.py on a GPU machine without network (Python 3.12, CUDA 13), and
# nvidia-ml-py for lab/power_clock.py.
#   lab/fa4_wheels.sh download DIR   (a machine with PyPI): the wheels into DIR; the 92 MB
#                                      cu13 libs wheel split into DIR/cu13.part.* of 46 MB, so that
#                                      no one transfer exceeds 64 MiB (carry the parts in two calls).
#   lab/fa4_wheels.sh install DIR SITE   (the GPU machine): joins the parts, installs with
#                                      pip --target SITE, and prints the PYTHONPATH to export
#                                      (the cutlass wheel's .pth is not run under --target, so its
#                                      dsl_packages folder goes on PYTHONPATH too).
set -euo pipefail
WHEELS="flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1
nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 quack-kernels==0.6.5
apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 nvidia-ml-py==13.615.71"
case ${1:?download or install} in
  download)
    dir=${2:?DIR}; mkdir -p "$dir"
    for w in $WHEELS; do
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        -d "$dir" "$w"
    done
    big=$(ls "$dir"/nvidia_cutlass_dsl_libs_cu13-*.whl)
    split -b 46M "$big" "$dir/cu13.part."
    echo "$(basename "$big")" > "$dir/cu13.name"; rm "$big"
    ls -la "$dir" ;;
  install)
    dir=${2:?DIR}; site=${3:?SITE}
    if ls "$dir"/cu13.part.* > /dev/null 2>&1; then cat "$dir"/cu13.part.* > "$dir/$(cat "$dir/cu13.name")"; fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$dir"/*.whl
    echo "export PYTHONPATH=$site:$site/nvidia_cutlass_dsl/dsl_packages\${PYTHONPATH:+:\$PYTHONPATH}" ;;
  *) echo "usage: $0 download DIR | install DIR SITE" >&2; exit 2 ;;
esac
