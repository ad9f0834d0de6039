"""The benchmarks, by area; run each from the checkout root as a module (README.md)."""
