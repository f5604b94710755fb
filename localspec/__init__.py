"""localspec: speculative decoding for local GGUF models, exactly as the target model would sample."""

__version__ = "0.1.0"
