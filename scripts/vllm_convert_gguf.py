"""Convert a GGUF model (the embedded SmolLM2's) to a Hugging Face folder that vLLM 0.32 can serve.

Run by scripts/vllm-setup.sh with the vLLM venv's Python (transformers, gguf, accelerate):
``python vllm_convert_gguf.py MODEL.gguf OUT_DIR``. Weights are dequantized to bfloat16.
"""

from __future__ import annotations

import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.bfloat16)
    # The loaded model remembers the GGUF quantizer; save_pretrained would refuse to write a quantized model
    # that it cannot serialize, and vLLM would look for GGUF weights.
    model.hf_quantizer = None
    model.config.quantization_config = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    model.config.torch_dtype = torch.bfloat16
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: vllm_convert_gguf.py MODEL.gguf OUT_DIR")
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
