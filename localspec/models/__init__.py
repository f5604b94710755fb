"""GGUF model files: headers, vocabulary compatibility, discovery, the hub, the demo pair, quantizing."""
