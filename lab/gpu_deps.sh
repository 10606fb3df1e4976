#!/usr/bin/env bash
# draftsmith's own dependencies for the GPU machine (torch and triton are there; pydantic, omegaconf,
# hydra, re2, ... are not, and tests/conftest.py imports the framework), as one small archive that
# lab/gpu_session.sh unpacks onto PYTHONPATH (about 5 MB: it fits in one call's carry beside FA4's
# first wheel folder).
#   lab/gpu_deps.sh download DIR   (a machine with PyPI and pip): DIR/site.tar.xz for Python 3.12, x86_64
set -euo pipefail
case ${1:?download} in
  download)
    dir=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd); tmp=$(mktemp -d)
    plat="--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
    # antlr4 4.9 (hydra's pin) is published as an sdist only: build its pure-Python wheel here.
    python3 -m pip wheel -q --no-deps -w "$tmp/whl" "antlr4-python3-runtime==4.9.3"
    python3 -m pip install -q --target "$tmp/site" --find-links "$tmp/whl" --only-binary=:all: $plat \
      "pydantic>=2.6,<3" "omegaconf>=2.3,<2.4" "hydra-core>=1.3" "pyyaml>=6" "tqdm>=4.60" "google-re2>=1.1" \
      "huggingface_hub>=0.20" "safetensors>=0.4"
    rm -rf "$tmp/site/hf_xet"* "$tmp/site/bin"  # hf_xet: 11 MB, only for downloads (none there)
    tar -C "$tmp/site" -cJf "$dir/site.tar.xz" .
    rm -rf "$tmp"; ls -la "$dir/site.tar.xz" ;;
  *) echo "usage: $0 download DIR" >&2; exit 2 ;;
esac
