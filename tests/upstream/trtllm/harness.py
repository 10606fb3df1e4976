"""Shared set-up of the TensorRT-LLM conformance suite: one synthetic checkpoint, its conversion,
the emitted package, the float64 oracle and the driver runs per adapter, all through draftsmith's
public surface (``python -m draftsmith synth|convert|emit``) and cached per session."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Optional

import torch

import excerpts
from support.cli import run_cli
from support.forkserver import run_script

REPO = Path(__file__).resolve().parents[3]
PINNED = (Path(__file__).resolve().parent / "standin" / "tensorrt_llm" / "pinned.py").read_text()
PINNED_MINIMUM_VERSION = re.search(r'PINNED_MINIMUM_VERSION = "([^"]+)"', PINNED).group(1)
OLD_VERSION = re.search(r'OLD_VERSION = "([^"]+)"', PINNED).group(1)
HERE = Path(__file__).resolve().parent
ADAPTERS = sorted(p.stem for p in (REPO / "adapters").glob("*.yaml"))


def _emit_refusals() -> dict:
    """Adapter -> why ``draftsmith emit target=trtllm`` refuses its tiny synthetic drafter
    (``compile/trtllm_limits.py``; e.g. DFlash 2 until its emit path exists): the suite skips
    those adapters, visibly, with that reason."""
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.compile.resolve import resolve
    from draftsmith.framework.compile.trtllm_limits import trtllm_problems
    from draftsmith.framework.convert.synth import source_config

    out = {}
    for name in ADAPTERS:
        a = load_adapter(name)
        problems = trtllm_problems(resolve(a, source_config(a, "tiny")))
        if problems:
            out[name] = "; ".join(problems)
    return out


#: adapters emit refuses -> the reason; SERVED: the adapters the suite drives through TensorRT-LLM
EMIT_REFUSED = _emit_refusals()
SERVED = [name for name in ADAPTERS if name not in EMIT_REFUSED]


def _driven_elsewhere() -> dict:
    """Adapter -> why the suites that build and run the drafter skip it although emit accepts it: a
    DFlash 2 drafter (family ``gqa_dflash2``) is served through TensorRT-LLM's DFlash 2 path by
    ``test_trtllm_p20_dflash2.py``; these suites build the DFlash excerpt, whose
    ``_validate_dflash2_config`` is omitted (transcribed in ``tests/upstream/trtllm/trtllm_dflash2.py``)."""
    from draftsmith.framework.compile.adapter import load_adapter

    return {name: "DFlash 2: built and drafted through TensorRT-LLM's DFlash 2 path by test_trtllm_p20_dflash2.py "
                  "(this test builds the DFlash excerpt, which omits _validate_dflash2_config)"
            for name in SERVED if load_adapter(name).spec.family == "gqa_dflash2"}


#: served adapters whose build-and-draft tests a dedicated suite runs -> the reason
DRIVEN_ELSEWHERE = _driven_elsewhere()


def _kind_representatives() -> dict:
    """The first served adapter (by name) of each drafter kind, (family, with DSpark heads): the
    adapters whose emitted packages share every line a kind-independent test reads -> the adapters
    it stands for."""
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.compile.resolve import resolve
    from draftsmith.framework.convert.synth import source_config

    kinds: dict = {}
    for name in SERVED:
        a = load_adapter(name)
        r = resolve(a, source_config(a, "tiny"))
        kinds.setdefault((r.family, bool(r.heads.markov_rank) or r.heads.confidence), []).append(name)
    return {names[0]: names for names in kinds.values()}


#: one served adapter per drafter kind -> every served adapter of that kind (kind-independent tests:
#: the package's version floor, its portability; a test of what varies by layout takes ``case``)
KIND_REPRESENTATIVES = _kind_representatives()
CONTEXT = 12  # target tokens of context; above the tiny adapters' window of 8
SEED = 1729


def cli(*args):
    """``draftsmith ARGS`` in this process (``support.cli.run_cli``), as a CompletedProcess."""
    r = run_cli(args)
    return subprocess.CompletedProcess(["draftsmith", *args], r.code, r.out, r.err)


def one_line(msg: str) -> bool:
    return "\n" not in msg.strip() and "Traceback" not in msg


@dataclass
class Case:
    """One adapter's synthetic checkpoint, conversion, emitted package and oracle."""

    adapter: str
    root: Path
    runs: dict = field(default_factory=dict)
    synth_args: tuple = ()  # extra ``draftsmith synth`` arguments (e.g. an ``adapter.synth.tiny`` override)

    @cached_property
    def source(self) -> Path:
        out = self.root / "source"
        if (out / "config.json").is_file():
            return out
        r = cli("synth", f"adapter={self.adapter}", "scale=tiny", f"out={out}", f"seed={SEED}", *self.synth_args)
        assert r.returncode == 0, f"synth {self.adapter}: {r.stderr[-2000:]}"
        return out

    @cached_property
    def converted(self) -> Path:
        out = self.root / "converted"
        if (out / "config.json").is_file():
            return out
        r = cli("convert", f"adapter={self.adapter}", f"source={self.source}", f"out={out}")
        assert r.returncode == 0, f"convert {self.adapter}: {r.stderr[-2000:]}"
        return out

    @cached_property
    def config(self) -> dict:
        return json.loads((self.converted / "config.json").read_text())

    @cached_property
    def raw_config(self) -> dict:
        return json.loads((self.source / "config.json").read_text())

    @property
    def target(self) -> Path:
        return self.source / "target"

    @cached_property
    def emitted(self):
        """(CompletedProcess, package dir or None) of ``draftsmith emit``."""
        out = self.root / "emitted"
        # config=: the snippet states the checkpoint's block_size / mask_token_id / target_layer_ids
        r = cli("emit", f"adapter={self.adapter}", "target=trtllm", f"out={out}", f"config={self.converted}")
        pkgs = [p for p in out.glob("*") if (p / "__init__.py").is_file()] if out.is_dir() else []
        return r, (pkgs[0] if r.returncode == 0 and len(pkgs) == 1 else None)

    def package(self) -> Path:
        r, pkg = self.emitted
        assert pkg is not None, f"`draftsmith emit adapter={self.adapter} target=trtllm` failed: " \
                                f"{(r.stderr or r.stdout).strip()[-800:]}"
        return pkg

    @cached_property
    def inputs(self) -> Path:
        g = torch.Generator().manual_seed(SEED + 1)
        fc_in = self.weights["fc.weight"].shape[1]
        hidden = torch.randn(CONTEXT, fc_in, generator=g).to(torch.bfloat16).float()
        anchor = int(torch.randint(0, self.config["vocab_size"], (1,), generator=g))
        path = self.root / "inputs.pt"
        torch.save({"hidden": hidden, "anchor": anchor}, path)
        return path

    @cached_property
    def weights(self) -> dict:
        from safetensors.torch import load_file

        out = {}
        for f in self.converted.glob("*.safetensors"):
            out.update(load_file(str(f)))
        return out

    @cached_property
    def oracle(self):
        """(tokens, logits) of section 1 of drafter-reference.md in float64 (tests/support/oracles.py)."""
        sys.path.insert(0, str(REPO / "tests"))
        from support.oracles import draft_oracle
        from safetensors.torch import load_file

        data = torch.load(self.inputs)
        tgt = load_file(str(self.target / "model.safetensors"))
        toks, logits, _ = draft_oracle(self.config, self.weights, tgt, data["hidden"], data["anchor"])
        return toks, logits

    @property
    def sample_from_anchor(self) -> bool:
        return bool((self.config.get("dspark_config") or {}).get("sample_from_anchor", False))

    @property
    def is_dflash(self) -> bool:
        """A drafter with no DSpark head and no shift (slot 0 only the anchor): TensorRT-LLM's
        DFlash. Anything else is DSpark."""
        ds = self.config.get("dspark_config") or {}
        return not (ds.get("sample_from_anchor") or ds.get("markov_rank") or ds.get("enable_confidence_head"))

    @property
    def layers(self) -> list:
        """Per layer ``{causal, window, lowering}`` (the draftsmith section's ``layers[i].mask``
        and ``.lowering``)."""
        return [{**l["mask"], "lowering": l["lowering"]} for l in self.config["draftsmith"]["layers"]]

    def drive(self, mode: str, checkpoint: Optional[Path] = None, env: Optional[dict] = None,
              package: Optional[Path] = None, arch_modules: Optional[dict] = None,
              backends: Optional[list] = None) -> dict:
        """Run drive.py in its own process (``support.forkserver``; cached by arguments). ``backends``: drive.py's runs
        (default ``VANILLA``, ``TRTLLM``; ``NAME:arena`` for a paged backend on the private arena)."""
        pkg = package or (self.root if mode == "config" else self.package())
        key = (mode, str(checkpoint), json.dumps(env, sort_keys=True), str(pkg), json.dumps(arch_modules),
               json.dumps(backends))
        if key in self.runs:
            excerpts.skip_if_driver_lacked_them(self.runs[key])
            return self.runs[key]
        n = len(self.runs)
        args = {"mode": mode, "package_dir": str(pkg), "checkpoint": str(checkpoint or self.converted),
                "target": str(self.target), "inputs": str(self.inputs), "arch_modules": arch_modules,
                "backends": backends, "result": str(self.root / f"result{n}.json")}
        (self.root / f"args{n}.json").write_text(json.dumps(args))
        import os

        e = {k: v for k, v in os.environ.items() if k != "DS_STANDIN_TRTLLM_VERSION"}
        e.update(env or {})
        p = run_script(HERE / "drive.py", self.root / f"args{n}.json", timeout=300, env=e)
        assert Path(args["result"]).is_file(), f"driver died: {p.stderr[-3000:]}"
        res = json.loads(Path(args["result"]).read_text())
        self.runs[key] = res
        excerpts.skip_if_driver_lacked_them(res)
        assert "fatal" not in res, f"driver: {res['fatal']['error']}\n{res['fatal']['trace']}"
        return res

    def serve(self) -> dict:
        return self.drive("serve")

    def worker(self) -> dict:
        serve = self.serve()
        return self.drive("worker", arch_modules=serve.get("exported_arch_modules") or {})


_CASES: dict = {}


def get_case(name: str, tmp_path_factory) -> Case:
    """The session's ``Case`` of adapter ``name`` (made once)."""
    if name not in _CASES:
        _CASES[name] = Case(name, tmp_path_factory.mktemp(f"trtllm-{name}"))
    return _CASES[name]


def tiny_heads_override(name: str, heads: int, kv_heads: int) -> str:
    """The ``draftsmith synth`` argument giving adapter ``name``'s tiny checkpoint ``heads`` query and
    ``kv_heads`` KV heads (its ``synth.tiny`` keys ending in ``num_attention_heads`` /
    ``num_key_value_heads``, following ``extends``; merged into the tiny map)."""
    import yaml

    keys, spec = {}, yaml.safe_load((REPO / "adapters" / f"{name}.yaml").read_text())
    while True:
        for k in ((spec.get("synth") or {}).get("tiny") or {}):
            for want, n in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
                if k.endswith(want):
                    keys.setdefault(want, (k, n))
        if not spec.get("extends"):
            break
        spec = yaml.safe_load((REPO / "adapters" / f"{spec['extends']}.yaml").read_text())
    assert len(keys) == 2, f"{name}: synth.tiny names no head counts ({keys})"
    return "adapter.synth.tiny={" + ", ".join(f"{k}: {n}" for k, n in keys.values()) + "}"


def get_wide_case(name: str, tmp_path_factory, heads: int = 8, kv_heads: int = 4) -> Case:
    """Adapter ``name`` at tiny scale with ``heads`` / ``kv_heads`` (tensor parallelism up to ``heads``
    ranks; KV heads duplicated past ``kv_heads``), made once per session."""
    key = (name, heads, kv_heads)
    if key not in _CASES:
        _CASES[key] = Case(name, tmp_path_factory.mktemp(f"trtllm-{name}-h{heads}kv{kv_heads}"),
                           synth_args=(tiny_heads_override(name, heads, kv_heads),))
    return _CASES[key]


def mask_matrix(causal: bool, left: int, right: int, c: int, b: int) -> torch.Tensor:
    """Allowed (query, key) pairs of a block of ``b`` queries after ``c`` context keys, for
    flash-attn ``(causal, (left, right))`` bounds (``-1`` unbounded)."""
    pos = torch.arange(c, c + b)[:, None]
    k = torch.arange(c + b)[None, :]
    ok = torch.ones(b, c + b, dtype=torch.bool)
    if causal:
        ok &= k <= pos
    if left >= 0:
        ok &= k >= pos - left
    if right >= 0:
        ok &= k <= pos + right
    return ok


def expected_mask(layer: dict, c: int, b: int) -> torch.Tensor:
    """The mask drafter-reference.md section 2 gives a layer ``{causal, window}``."""
    w = layer["window"]
    left = -1 if w is None else w - 1
    right = (0 if layer["causal"] else (-1 if w is None else w - 1))
    return mask_matrix(bool(layer["causal"]), left, right, c, b)


def stage_error(out: dict) -> Optional[str]:
    for k in ("build", "load", "decode"):
        if isinstance(out.get(k), dict) and "error" in out[k]:
            return f"{k}: {out[k]['error']}\n{out[k].get('trace', '')}"
    return None


def assert_matches_oracle(case: Case, out: dict, where: str):
    """Drafted tokens equal the float64 oracle's; logits within float32/bf16 tolerance."""
    problem = stage_error(out)
    assert problem is None, f"{case.adapter} {where}: {problem}"
    toks, logits = case.oracle
    got = torch.tensor(out["logits"], dtype=torch.float64)
    assert got.shape == logits.shape, f"{case.adapter} {where}: drafted {tuple(got.shape)} rows, oracle {tuple(logits.shape)}"
    scale = float(logits.abs().max())
    err = float((got - logits).abs().max())
    assert err <= 2e-3 * max(1.0, scale), f"{case.adapter} {where}: logits differ from the oracle by {err:.3g} (scale {scale:.3g})"
    assert out["tokens"] == toks.tolist(), f"{case.adapter} {where}: tokens {out['tokens']} != oracle {toks.tolist()}"
