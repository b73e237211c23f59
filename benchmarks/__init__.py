"""Benchmarks of the reference's gather and real step.

``python -m benchmarks --vs-vllm`` compares with vLLM's own ``EncoderRunner``;
``python -m benchmarks`` with a self-written per-request loop, for machines without
vLLM; ``--quick`` runs small sizes and checks outputs only. Nothing in the package
imports this folder.
"""
