"""Reading recorded results: run tables, paired comparisons, the paper's tables, result plots,
the headline, the claims, the appendix's readings, the trace explorer, and the book's concept
figures.
Everything here reads files or draws; nothing calls a model."""
