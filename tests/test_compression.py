"""Terminal compression that keeps the evidence: snippet validation against real HotpotQA
paragraphs, the fallback to the documents, the learned extractive selector, the config switch,
and the answer prompt conditioned on the question's shape."""
import numpy as np
import pytest

from dynakrag_lite import prompts
from dynakrag_lite.actions import answer, apply_action, compress_answer_evidence
from dynakrag_lite.compression import (QUOTE_THRESHOLD, ExtractiveCompressor, SentenceSelector,
                                       build_compression, load_selector, sentence_features,
                                       validate_snippets)
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.data.sources import load_dataset
from dynakrag_lite.pipeline import extractive_compressor
from dynakrag_lite.state import RetrievedDoc, initial_state
from dynakrag_lite.text import paragraph_sentences
from dynakrag_lab.studies.selector import answer_in, label_sentences, train_sentence_selector

from helpers import ScriptedGenerator


@pytest.fixture(scope="module")
def hotpot(shared_data_dir):
    return {q.id: q for q in load_dataset(shared_data_dir / "hotpotqa.jsonl")}


def _docs(q, titles):
    out = []
    for i, t in enumerate(titles):
        p = next(p for p in q.paragraphs if p.title == t)
        out.append(RetrievedDoc(f"d{i}", p.title, p.text, 0.9 - i / 10, "retrieve_more", 0))
    return out


@pytest.fixture(scope="module")
def pablo(hotpot):
    """'Where is the author of Killing Pablo ... born?' (gold: St. Louis, Missouri), with the
    two gold paragraphs around a distractor."""
    q = hotpot["5a76334c5542994ccc918710"]
    return q, _docs(q, ["Killing Pablo", "Roger Hunt", "Mark Bowden"])


# -- validating LLM snippets ------------------------------------------------------------
def test_validation_keeps_quotes_drops_templates_inventions_duplicates(pablo):
    q, docs = pablo
    parsed = [
        "[3] Born in St. Louis, Missouri, he is a 1973 graduate",
        "[1] Killing Pablo: The Hunt for the World's Greatest Outlaw (2001) is a book by Mark "
        "Bowden",
        "[2] snippet",
        "[1] <text copied from the document>",
        "[3] Mark Bowden was raised on a farm in Ohio and wrote many novels",
        "[1] is a book by Mark Bowden that details the efforts by the governments",
        "[3] Louis",
    ]
    kept, dropped, _ = validate_snippets(parsed, docs)
    # document order, whatever the model's order; each snippet knows its document
    assert [(s.doc_index, s.doc_id, s.title) for s in kept] == [
        (0, "d0", "Killing Pablo"), (2, "d2", "Mark Bowden")]
    reasons = [r.split(" (")[0] for _, r in dropped]
    assert reasons == ["template", "template", "no_match", "duplicate", "too_short"]
    # HotpotQA cut "Born in St. | Louis, Missouri" into two sentences: the quote crossing
    # the boundary brings both back, so the answer string survives.
    assert kept[1].sentence_ids == (2, 3)
    assert answer_in("St. Louis, Missouri", " ".join(kept[1].sentences))


def test_answer_reads_source_sentences_with_titles_one_line_per_doc(pablo):
    q, docs = pablo
    comp = build_compression(["- [3] He is a National Correspondent for The Atlantic",
                              "- [1] It relates how Escobar was killed",
                              "- [3] Mark Robert Bowden (born July 17, 1951) is an American"],
                             "raw", None, docs)
    assert not comp.fallback_to_docs
    s_bowden = paragraph_sentences(docs[2].text)
    assert comp.snippets == (
        "Killing Pablo: It relates how Escobar was killed and his cartel dismantled.",
        f"Mark Bowden: {s_bowden[0]} {s_bowden[1]}")
    assert comp.n_parsed == 3 and len(comp.valid_snippets) == 3
    assert "2 snippets" in comp.note and "docs [1, 3]" in comp.note


def test_paraphrase_below_threshold_is_dropped(pablo):
    _, docs = pablo
    kept, dropped, ratios = validate_snippets(
        ["Bowden, a writer from America, was born in 1951 in a city in Missouri"], docs)
    assert not kept and ratios[0] < QUOTE_THRESHOLD
    kept, _, ratios = validate_snippets(  # a copy with one word changed passes
        ["Mark Robert Bowden (born July 17, 1951) is an American journalist and author"],
        docs)
    assert kept and ratios[0] >= QUOTE_THRESHOLD


def test_identical_text_goes_to_the_document_number_the_model_wrote():
    a = RetrievedDoc("a", "A", "The bridge was opened in 1932 by the mayor.", 0.9, "r", 0)
    b = RetrievedDoc("b", "B", "The bridge was opened in 1932 by the mayor.", 0.8, "r", 0)
    kept, _, _ = validate_snippets(["[2] The bridge was opened in 1932"], [a, b])
    assert kept[0].doc_id == "b"
    kept, _, _ = validate_snippets(["The bridge was opened in 1932"], [a, b])
    assert kept[0].doc_id == "a"  # no hint: the earlier document


# -- fallback to the documents ----------------------------------------------------------
def test_fallback_when_nothing_valid(pablo):
    _, docs = pablo
    comp = build_compression(["[1] snippet", "[2] snippet"], "raw", None, docs)
    assert comp.fallback_to_docs and comp.snippets == ()
    assert comp.fallback_reason.startswith("0 valid snippets")
    assert "fallback_to_docs" in comp.note


def test_fallback_when_snippets_cover_one_doc_of_a_multi_doc_state(pablo):
    _, docs = pablo
    one_doc = ["[3] He is a National Correspondent for The Atlantic",
               "[3] Mark Robert Bowden (born July 17, 1951) is an American writer"]
    comp = build_compression(one_doc, "raw", None, docs)
    assert comp.fallback_to_docs and "cover 1 doc" in comp.fallback_reason
    assert len(comp.valid_snippets) == 2  # the record still says what was valid
    assert not build_compression(one_doc, "raw", None, docs, min_docs=1).fallback_to_docs
    # a one-document state cannot cover two
    assert not build_compression(one_doc, "raw", None, docs[2:]).fallback_to_docs


class RecordingGenerator(ScriptedGenerator):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.messages = []

    def generate(self, messages, max_tokens=64, stop=None):
        self.messages.append(messages)
        return super().generate(messages, max_tokens, stop)


def _stopped_state(env, q):
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    return apply_action(s, "stop_answer", env)


@pytest.fixture()
def library_q(library_questions):
    return next(x for x in library_questions if x.type == "bridge")


def test_action_validates_llm_snippets_and_answer_reads_them(library_retriever, library_q):
    probe = Environment(library_retriever, ScriptedGenerator())
    docs = _stopped_state(probe, library_q).docs
    reply = "\n".join(f"- [{i}] {paragraph_sentences(d.text)[0]}" for i, d in
                      enumerate(docs[:2], start=1))
    gen = RecordingGenerator(compress=reply)
    env = Environment(library_retriever, gen)
    s, comp = compress_answer_evidence(_stopped_state(env, library_q), env)
    assert comp.method == "llm" and not comp.fallback_to_docs
    assert comp.snippets == tuple(f"{d.title}: {paragraph_sentences(d.text)[0]}" for d in docs[:2])
    assert s.history[-1] == "compress_answer_evidence" and s.ledger.llm_calls == 1
    s, pred, _ = answer(s, env, comp.snippets)
    assert gen.messages[-1][-1]["content"].startswith("Evidence:\n" + comp.snippets[0])


def test_finish_records_the_compression_counts_in_its_trace_step(library_retriever,
                                                                 library_q):
    """The compression step of a trace carries Compression.stats as plain JSON, so analyses
    read n_parsed / n_valid / drop reasons without parsing the note."""
    import json
    from dynakrag_lite.controller import finish
    probe = Environment(library_retriever, ScriptedGenerator())
    docs = _stopped_state(probe, library_q).docs
    reply = "\n".join([f"- [{i}] {paragraph_sentences(d.text)[0]}"
                       for i, d in enumerate(docs[:2], start=1)] + ["- [1] snippet", "- [2] b"])
    env = Environment(library_retriever, RecordingGenerator(compress=reply))
    trace = []
    finish(_stopped_state(env, library_q), env, trace)
    step = json.loads(json.dumps(trace[-1].to_json()))
    assert step["action"] == "compress_answer_evidence"
    assert step["compression"] == {"method": "llm", "n_parsed": 4, "n_valid": 2,
                                   "dropped": {"template": 1, "too_short": 1, "no_match": 0,
                                               "duplicate": 0},
                                   "fallback_to_docs": False, "fallback_reason": ""}
    assert "(llm; 2/4 valid" in step["note"]  # the note still says it, for readers


@pytest.mark.parametrize("up_to, compressed", [(0, True), (2, True), (3, False), (12, False)])
def test_answer_stage_reads_the_documents_up_to_k_and_compresses_above(
        library_retriever, library_q, up_to, compressed):
    """answer_docs_up_to = K: a stopped state with at most K documents (here 3) is answered
    from the documents without a compression call or step; above K it is compressed."""
    from dynakrag_lite.controller import finish
    from dynakrag_lite.validity import valid_actions
    gen = RecordingGenerator()
    env = Environment(library_retriever, gen, ControlConfig(answer_docs_up_to=up_to))
    state = _stopped_state(env, library_q)
    assert len(state.docs) == 3
    assert valid_actions(state, env.config) == (("compress_answer_evidence",) if compressed
                                                 else ())
    trace, calls = [], state.ledger.llm_calls
    final, _, snippets = finish(state, env, trace)
    assert [t.action for t in trace] == (["compress_answer_evidence"] if compressed else [])
    assert final.ledger.llm_calls - calls == (2 if compressed else 1)
    if not compressed:
        assert snippets == () and gen.messages[-1][-1]["content"].startswith("Documents:\n[1] ")


def test_action_falls_back_to_docs_on_invented_snippets(library_retriever, library_q):
    gen = RecordingGenerator()  # replies "- [1] a fact\n- [2] b": matches no document
    env = Environment(library_retriever, gen)
    s, comp = compress_answer_evidence(_stopped_state(env, library_q), env)
    assert comp.fallback_to_docs and comp.snippets == ()
    assert [r for _, r in comp.dropped] == ["too_short", "too_short"]  # "a fact", "b"
    answer(s, env, comp.snippets)
    assert gen.messages[-1][-1]["content"].startswith("Documents:\n[1] ")


# -- the extractive selector ------------------------------------------------------------
def test_label_rule_matches_annotated_supporting_sentences(hotpot):
    """Les McCann question: the rule's positives are exactly HotpotQA's supporting facts
    (Les McCann, 0) and (Live at Shelly's Manne-Hole, 0); distractors are all negative."""
    q = hotpot["5a77d31c55429967ab1052c0"]
    docs = [RetrievedDoc(str(j), p.title, p.text, 0.5, "x", 0) for j, p in
            enumerate(q.paragraphs)]
    rows = sentence_features(q.question, docs)
    y = label_sentences(q.question, q.answers, docs, q.supporting_titles, rows)
    pos = {(docs[d].title, s) for d, s, lab in zip(rows.doc_index, rows.sent_index, y) if lab}
    assert pos == {("Les McCann", 0), ("Live at Shelly's Manne-Hole", 0)}
    assert y.sum() == 2 and len(y) > 20


@pytest.fixture(scope="module")
def selector(library_questions, library_retriever, tmp_path_factory):
    train = [q for i, q in enumerate(library_questions) if i % 3 != 0]
    sel = train_sentence_selector(train, library_retriever, k_docs=6, model="logreg",
                                  meta={"note": "test"})
    path = sel.save(tmp_path_factory.mktemp("sel") / "selector.joblib")
    return sel, path


def test_selector_saved_with_metadata_and_reloads_identically(selector, library_questions,
                                                               library_retriever):
    sel, path = selector
    loaded = load_selector(path)
    assert loaded.meta["note"] == "test" and loaded.meta["model"] == "logreg"
    assert loaded.meta["embedder"] == library_retriever.embedder_name
    assert loaded.meta["n_positive"] > 0 and len(loaded.meta["train_ids"]) == 40
    q = library_questions[0]
    rows = sentence_features(q.question, [
        RetrievedDoc(str(i), p.title, p.text, 0.5, "x", 0)
        for i, p in enumerate(q.paragraphs[:4])], library_retriever.encode)
    assert np.allclose(sel.predict_proba(rows.X), loaded.predict_proba(rows.X))


def test_selector_rejects_other_files(tmp_path):
    import joblib
    joblib.dump({"format": "something else"}, tmp_path / "x.joblib")
    with pytest.raises(ValueError):
        SentenceSelector.load(tmp_path / "x.joblib")


# -- selectors are pickles: the manifest guards the project's folder ----------------------
def _tiny_selector(note="tiny") -> SentenceSelector:
    from sklearn.linear_model import LogisticRegression
    from dynakrag_lite.compression import FEATURES
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, len(FEATURES)))
    return SentenceSelector(LogisticRegression().fit(X, (X[:, 0] > 0).astype(int)),
                            meta={"note": note})


class _Payload:
    """Unpickling this touches a marker file: the stand-in for malicious code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path
        return (Path.touch, (self.marker,))


@pytest.fixture
def selectors_folder(tmp_path):
    """A folder that keeps a manifest, as results/selectors does (the real one is shared and
    committed)."""
    folder = tmp_path / "selectors"
    folder.mkdir()
    (folder / "MANIFEST.sha256").write_text("")
    return folder


def test_committed_selectors_match_the_committed_manifest():
    import hashlib
    from dynakrag_lite.experiments.artifacts import SELECTORS_DIR
    from dynakrag_lite.storage import MANIFEST_NAME, read_manifest
    files = sorted(SELECTORS_DIR.glob("*.joblib"))
    assert files, "results/selectors holds the committed sentence selector"
    entries = read_manifest(SELECTORS_DIR)
    assert sorted(entries) == [f.name for f in files], (
        "register the new selector: dynakrag_lab.studies.selector.register_selector(path)")
    for f in files:
        assert entries[f.name] == hashlib.sha256(f.read_bytes()).hexdigest(), f.name
    assert (SELECTORS_DIR / MANIFEST_NAME).read_text().count("  ") == len(files)  # sha256sum
    loaded = load_selector(files[0])  # verified, then unpickled
    assert loaded.meta and loaded.sha256 == entries[files[0].name]


def test_project_selector_folder_is_registered_by_the_experiments(tmp_path, monkeypatch):
    """results/selectors is the experiments' business: register_selector starts its manifest
    there even before it has one."""
    from dynakrag_lite.experiments import artifacts
    from dynakrag_lab.studies.selector import register_selector
    folder = tmp_path / "selectors"
    folder.mkdir()
    monkeypatch.setattr(artifacts, "SELECTORS_DIR", folder)
    path = _tiny_selector().save(folder / "hotpotqa-sentence-selector.joblib")
    assert register_selector(path) == folder / "MANIFEST.sha256"
    assert load_selector(path, trusted=False).meta["note"] == "tiny"


def test_selector_in_a_manifest_folder_unlisted_or_tampered_is_refused(selectors_folder,
                                                                         tmp_path):
    from dynakrag_lite.storage import ManifestError, register_in_manifest
    path = _tiny_selector().save(selectors_folder / "hotpotqa-sentence-selector.joblib")
    with pytest.raises(ManifestError, match=r"hotpotqa-sentence-selector\.joblib: not listed "
                                            r"in .*MANIFEST\.sha256.*register_in_manifest\("):
        load_selector(path)
    with pytest.raises(ManifestError, match="not listed"):  # the class method checks too
        SentenceSelector.load(path)
    assert register_in_manifest(path) == selectors_folder / "MANIFEST.sha256"
    assert load_selector(path).meta["note"] == "tiny"
    # Changed bytes: refused before anything is unpickled.
    marker = tmp_path / "code-ran"
    import pickle
    path.write_bytes(pickle.dumps(_Payload(marker)))
    for load in (load_selector, SentenceSelector.load):
        with pytest.raises(ManifestError, match=r"hotpotqa-sentence-selector\.joblib: sha256 .* "
                                                r"does not match.*register_in_manifest"):
            load(path)
    assert not marker.exists()
    # Registering the new bytes (what the training script does) makes them loadable again.
    _tiny_selector("retrained").save(path)
    register_in_manifest(path)
    assert load_selector(path).meta["note"] == "retrained"


def test_selector_elsewhere_is_trusted_unless_its_folder_keeps_a_manifest(tmp_path):
    from dynakrag_lite.storage import ManifestError, register_in_manifest
    own = _tiny_selector().save(tmp_path / "mine.joblib")
    assert register_in_manifest(own) is None  # a user's folder: no manifest imposed
    assert load_selector(own).meta["note"] == "tiny"
    with pytest.raises(ManifestError, match="not listed"):
        load_selector(own, trusted=False)
    (tmp_path / "MANIFEST.sha256").write_text("")  # a folder that keeps a manifest is checked
    with pytest.raises(ManifestError, match="mine.joblib: not listed"):
        load_selector(own)
    assert register_in_manifest(own) == tmp_path / "MANIFEST.sha256"
    assert load_selector(own, trusted=False).meta["note"] == "tiny"


def test_selector_learned_on_real_train_questions_keeps_answer_sentences(hotpot):
    """Trained on 200 HotpotQA questions of the CLI's training split (their own 10 paragraphs,
    no embeddings), tested on 100 others: the 4 sentences it selects out of ~40 hold the
    answer string far more often than the lead sentences of the first 4 paragraphs do, and
    come back in document order, each a real sentence of its document."""
    from dynakrag_lite.data.sources import split_questions
    qs = list(hotpot.values())
    train, evals = split_questions(qs, 100, 0)
    assert not {q.id for q in train} & {q.id for q in evals}

    def docs_for(q):
        return [RetrievedDoc(str(i), p.title, p.text, 0.5, "x", 0)
                for i, p in enumerate(q.paragraphs)]

    sel = train_sentence_selector(train[:200], None, model="logreg", use_embeddings=False,
                                  docs_for=docs_for)
    comp = ExtractiveCompressor(sel)
    n = sel_hits = lead_hits = 0
    for q in train[200:300]:
        docs = docs_for(q)
        if not any(answer_in(a, d.text) for a in q.answers for d in docs):
            continue
        n += 1
        picked = comp.select(q.question, docs, max_snippets=4)
        assert 0 < len(picked) <= 4
        order = [(s.doc_index, s.sentence_ids[0]) for s in picked]
        assert order == sorted(order)
        assert all(s.sentences[0] in paragraph_sentences(docs[s.doc_index].text) for s in picked)
        sel_hits += any(answer_in(a, s.text) for a in q.answers for s in picked)
        lead = [paragraph_sentences(d.text)[0] for d in docs[:4]]
        lead_hits += any(answer_in(a, t) for a in q.answers for t in lead)
    assert n >= 60
    assert sel_hits / n >= 0.55 and sel_hits - lead_hits >= 0.15 * n


def test_config_switch_extractive_makes_no_llm_call(selector, library_retriever, library_q):
    _, path = selector
    gen = RecordingGenerator()
    env = Environment(library_retriever, gen, ControlConfig(compressor="extractive"),
                      compressor=extractive_compressor(load_selector(path), library_retriever))
    s0 = _stopped_state(env, library_q)
    s, comp = compress_answer_evidence(s0, env)
    assert gen.calls == [] and s.ledger == s0.ledger
    assert comp.method == "extractive" and comp.generation is None
    assert comp.snippets and not comp.fallback_to_docs
    assert s.history[-1] == "compress_answer_evidence"


def test_extractive_without_a_compressor_fails_clearly(library_retriever, library_q):
    env = Environment(library_retriever, ScriptedGenerator(),
                      ControlConfig(compressor="extractive"))
    with pytest.raises(ValueError, match="needs Environment.compressor"):
        compress_answer_evidence(_stopped_state(env, library_q), env)


# -- the answer prompt follows the question's shape -------------------------------------
MALFORMED_GOLD = {"5a7fa08d55429969796c1af7", "5ac5632e5542993e66e823d9"}  # yes/no questions
# whose recorded gold answers are sentences ("Drunter und Drüber is a ...", "by")


def test_is_yes_no_question_on_real_hotpotqa_comparisons(hotpot):
    comp = [q for q in hotpot.values() if q.type == "comparison"]
    yn = [q for q in comp if q.answers[0].lower() in ("yes", "no")]
    ent = [q for q in comp if q not in yn and q.id not in MALFORMED_GOLD]
    assert len(yn) >= 20 and len(ent) >= 80
    assert [q.question for q in yn if not prompts.is_yes_no_question(q.question)] == []
    assert [q.question for q in ent if prompts.is_yes_no_question(q.question)] == []
    # among them, choice questions that open like yes/no ones ("Is X or Y ...?")
    assert any(q.question.split()[0].lower() in ("is", "was", "did", "does") for q in ent)


def test_is_yes_no_question_forms():
    assert prompts.is_yes_no_question("Are both Cooking Light and Vibe magazines?")
    assert prompts.is_yes_no_question("Both Sorbaria and Goldenrod are a genus of plants?")
    assert prompts.is_yes_no_question("Did either Anna or Ben win an Oscar?")
    assert not prompts.is_yes_no_question("Is Rutgers University or Brown University public?")
    assert not prompts.is_yes_no_question("Henry Roth and Lewis Mumford are both this "
                                          "nationality?")
    assert not prompts.is_yes_no_question("Which magazine was started first, A or B?")
    assert not prompts.is_yes_no_question("")


def test_answer_prompts_offer_yes_no_only_to_yes_no_questions(pablo):
    q, docs = pablo
    for msgs in (prompts.answer_messages(q.question, docs),
                 prompts.answer_from_snippets_messages(q.question, "x")):
        assert "yes" not in msgs[-1]["content"].split("Question:")[-1].lower()
    yn = "Were Gregory La Cava and Mike Judge both actors?"
    for msgs in (prompts.answer_messages(yn, docs),
                 prompts.answer_from_snippets_messages(yn, "x")):
        assert "yes or no" in msgs[-1]["content"].split("Question:")[-1]
