"""The serving emulator: a vLLM-like OpenAI-compatible server in its own process, for benchmarks and tests
without a GPU (replies a function of the prompt, ``reasoning`` / ``<think>`` styles, faults at set rates, an
emulated GPU replica with a prefix cache for ``pacore serve-vllm --emulate``).

Its own package (installed as ``pacore_emulator``, from the ``emulator/`` folder) because both the library's
``pacore serve-vllm --emulate`` and the benchmarks run it, and the library imports no benchmark. It imports
nothing of ``pacore_graph``: it stands for the server, not for a client.

    with Emulator(EmulatorConfig(ttft=0.5, token_delay=0.005, output_tokens=300)) as emu:
        llm = chat_model(base_url=emu.base_url, model=emu.config.model)

Command line: ``python -m pacore_emulator --port 8000`` (``--help`` lists the rest).
"""

from pacore_emulator.config import AnswerMix, EmulatorConfig, FaultRates
from pacore_emulator.process import Emulator, EmulatorError

__all__ = ["AnswerMix", "Emulator", "EmulatorConfig", "EmulatorError", "FaultRates"]
