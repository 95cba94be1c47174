"""Offline studies of the controller, one package each (its code, report section,
``__main__`` command line and README.md): ``diagnosis`` (where learned control loses its
signal, with the horizon and stop-target studies), ``stop_rule`` (the stop rules' lambda
sweeps), ``answer_stage`` (full documents on small final states), ``selector`` (the sentence
selector of the compressor), ``router`` (one-shot or multi-step per question) and
``reader_stop`` (the reader's confidence as a stop signal)."""
