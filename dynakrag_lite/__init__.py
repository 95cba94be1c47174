"""DynaKRAG-lite: learnable evidence control for multi-hop RAG, on a laptop CPU."""
__version__ = "0.1.0"
