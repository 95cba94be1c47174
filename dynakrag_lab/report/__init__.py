"""Reading recorded results: the shared names of datasets, readers and runs (:mod:`.names`),
run tables, paired comparisons, the paper's tables, result plots, the headline, the claims,
the appendix's readings, answer-label files, the trace explorer, and the book's concept figures.
Everything here reads files or draws; nothing calls a model, and nothing imports a study."""
