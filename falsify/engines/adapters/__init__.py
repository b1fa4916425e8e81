"""Engines no one here wrote, behind the engine protocol (falsify/engines/protocol.py), for `falsify gate --engine NAME`.

hf      HF transformers' Qwen3_5ForCausalLM on CPU (float32, eager attention), on the same tiny weights as the
        reference engine: generate (a StoppingCriteria polls the cancel token) and stepped prefill through its
        cache. Needs torch and transformers (tox -e oracle); importing this package does not.
generate  what hf and llamacpp share around a generate call: its arguments checked, its run record built.
broken  the reference engine with the cancel poll moved after the decode forward: a planted bug the
        cancellation falsifiers must catch on any engine (`--engine falsify.engines.adapters.broken:BrokenEngine`).
"""
