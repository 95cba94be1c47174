"""One generator interface and its backends (llama.cpp, transformers, OpenAI-compatible
servers), the persistent call cache and the bundled offline models."""
