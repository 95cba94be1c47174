"""Reading recorded results: run tables, paired comparisons, the paper's tables, result plots,
the headline and conclusions texts, the trace explorer, and the book's concept figures.
Everything here reads files or draws; nothing calls a model."""
