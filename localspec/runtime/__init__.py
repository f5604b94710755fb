"""llama.cpp through llama-cpp-python's low-level API: the library, loaded models, chat templates.

Importing this package does not load llama.cpp; the library is loaded when the
first model is opened or quantized (`library.llama()`).
"""
