"""Issue 45 point 1: every stand-in that remains where TensorRT-LLM's own code would run has the signature
of the function it stands for (parameter names, kinds, defaults; annotations aside, as the stand-ins run
on stubbed types), so it takes every argument the real caller passes and no other. Compared, by ``ast``
over the files (no import: this process may hold another ``tensorrt_llm``), with the verbatim excerpt's
definition where one exists, else with the signature recorded from the source the stand-in's header
cites (repository, path, commit)."""

import ast
from pathlib import Path

import pytest

import excerpts
from loader_standins import SIGNATURES

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "standin" / "tensorrt_llm" / "_torch"
LINEAR_FORWARD = ("NVIDIA/TensorRT-LLM", "tensorrt_llm/_torch/modules/linear.py", "stored file id 3478255898",
                  "(self, input, *, all_reduce_params=None, lora_params=None, layer_idx=None)")
DFLASH = ("amukkara/TensorRT-LLM", "tensorrt_llm/_torch/models/modeling_dflash.py",
          "d70a22876d5b0b13dcd5fee18e6dba2331c000a6")

#: (stand-in file, its qualified name) -> ("excerpt", file under $DRAFTSMITH_TRTLLM_SRC, qualified name)
#: or ("source", repository, path, commit, signature)
CASES = {
    ("standin/tensorrt_llm/_torch/modules/linear.py", "_forward"): ("source",) + LINEAR_FORWARD,
    ("standin/tensorrt_llm/_torch/modules/decoder_model.py", "DecoderModel.__init__"):
        ("excerpt", "deep/modeling_utils_excerpt.py", "DecoderModel.__init__"),
    ("standin/tensorrt_llm/_torch/modules/decoder_model.py", "DecoderModelForCausalLM.__init__"):
        ("excerpt", "deep/modeling_utils_excerpt.py", "DecoderModelForCausalLM.__init__"),
    ("standin/tensorrt_llm/_torch/models/modeling_dflash.py", "DFlashForCausalLM.__init__"):
        ("excerpt", "modeling_dflash_excerpt.py", "DFlashForCausalLM.__init__"),
    ("standin/tensorrt_llm/_torch/models/modeling_dflash.py", "DFlashForCausalLM.load_weights"):
        ("excerpt", "deep/dflash_excerpt.py", "DFlashLoadShell.load_weights"),
    ("standin/tensorrt_llm/_torch/models/modeling_dflash.py", "DFlashForCausalLM.dflash_forward"):
        ("excerpt", "deep/dflash_excerpt.py", "DFlashLoadShell.dflash_forward"),
    ("standin/tensorrt_llm/_torch/models/modeling_dflash.py", "DFlashForCausalLM._load_dflash2_weights"):
        ("source",) + SIGNATURES["DFlashForCausalLM._load_dflash2_weights"],
    ("standin/tensorrt_llm/_torch/models/modeling_dflash.py", "DFlashForCausalLM.load_weights_from_target_model"):
        ("source",) + DFLASH + ("(self, target_model: torch.nn.Module) -> None",),
    ("standin/tensorrt_llm/_torch/models/modeling_dflash.py", "DFlashForCausalLM.precompute_context_kv"):
        ("source",) + DFLASH + ("(self, projected_hidden: torch.Tensor, positions: torch.Tensor)",),
    ("standin/tensorrt_llm/_torch/models/modeling_dspark.py", "GQADSparkForCausalLM.__init__"):
        ("excerpt", "modeling_dspark_excerpt.py", "GQADSparkForCausalLM.__init__"),
    ("standin/tensorrt_llm/_torch/models/modeling_dspark.py", "GQADSparkForCausalLM.load_weights"):
        ("source",) + SIGNATURES["GQADSparkForCausalLM.load_weights"],
    ("trtllm_dflash2.py", "DFlashForCausalLM._validate_dflash2_config"):
        ("excerpt", "deep/dflash_excerpt.py", "DFlashLoadShell._validate_dflash2_config"),
    ("loader_standins.py", "_load_dflash2_weights"): ("source",) + SIGNATURES["DFlashForCausalLM._load_dflash2_weights"],
    ("loader_standins.py", "_take_dspark_head_weights"):
        ("source",) + SIGNATURES["_DSparkHeadMixin._take_dspark_head_weights"],
    ("loader_standins.py", "load_weights"): ("source",) + SIGNATURES["GQADSparkForCausalLM.load_weights"],
}


def _find(tree, qualname):
    """The def of ``Class.method`` (a class anywhere in the file) or of a function ``name`` (any depth)."""
    *cls, name = qualname.split(".")
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls[0]] if cls else [tree]
    for scope in scopes:
        for node in (ast.iter_child_nodes(scope) if cls else ast.walk(scope)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
    raise AssertionError(f"{qualname} is not defined")


def _shape(args: ast.arguments) -> str:
    """The parameter list without annotations: names, kinds, defaults."""
    for a in args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
        a.annotation = None
    return f"({ast.unparse(args)})"


def signature_in(path: Path, qualname: str) -> str:
    return _shape(_find(ast.parse(path.read_text()), qualname).args)


def recorded(signature: str) -> str:
    return _shape(ast.parse(f"def f{signature}: pass").body[0].args)


@pytest.mark.parametrize("standin,reference", list(CASES.items()), ids=[f"{Path(f).stem}:{q}" for f, q in CASES])
def test_each_remaining_standin_has_the_signature_of_what_it_stands_for(standin, reference):
    path, qualname = standin
    got = signature_in((HERE / path).resolve(), qualname)
    if reference[0] == "excerpt":
        src = excerpts.require()
        want, where = signature_in(src / reference[1], reference[2]), f"the excerpt {reference[1]} {reference[2]}"
    else:
        want, where = recorded(reference[4]), f"{reference[1]} {reference[2]} @ {reference[3]}"
    assert got == want, f"stand-in {path} {qualname}{got} differs from {where}{want}"


def test_the_comparison_sees_a_dropped_or_swallowing_parameter():
    """The shape compared is not vacuous: ``**_`` (the stand-in ``Linear.__init__``'s swallowing) or a
    dropped ``allow_partial_loading`` changes it."""
    real = recorded("(self, weights, weight_mapper=None, skip_modules=[], params_map=None, allow_partial_loading=False)")
    assert recorded("(self, weights, weight_mapper=None, skip_modules=(), **_)") != real
    assert recorded("(self, weights: dict, weight_mapper=None, skip_modules=[], params_map=None, "
                    "allow_partial_loading: bool = False)") == real
