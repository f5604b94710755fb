"""What commands run: a plan resolved once, a session of loaded models, the benchmark, draft making."""
