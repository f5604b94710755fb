"""The speculative engine: sampling, drafting, the acceptance rule and the generation loop."""
