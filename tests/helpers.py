"""Test doubles. The library has no fake generator; tests that check control logic (not model
quality) use this scripted one so that thousands of states can be explored in seconds. Tests
of real behaviour use the bundled models (see test_generators, test_end_to_end)."""
from __future__ import annotations

from dynakrag_lite.generators import Generation


class ScriptedGenerator:
    """Replies by prompt kind; ``replies`` overrides a kind (e.g. to send garbage)."""
    spec = "scripted"
    model_id = "scripted"

    def __init__(self, **replies: str):
        self.replies = {"sufficiency": "INSUFFICIENT: birthplace of the founder",
                        "rewrite": "founder of the label", "compress": "- [1] a fact\n- [2] b",
                        "answer": "Answer: Paris", **replies}
        self.calls: list[str] = []

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        user = messages[-1]["content"]
        if "contain every fact" in user:
            kind = "sufficiency"
        elif "new search query" in user:
            kind = "rewrite"
        elif "Snippets:" in user or "Facts:" in user:
            kind = "compress"
        else:
            kind = "answer"
        self.calls.append(kind)
        return Generation(self.replies[kind], len(user) // 4, 7, 0.0)
