"""Model cards: sentence-transformers' layout, front matter a Hub parser reads, drmix's facts in the body."""
import json

import pytest
import yaml
from huggingface_hub import ModelCard

from drmix.config import TrainConfig
from drmix.report.card import DEFAULT_HUB_ID, CardInfo, CollectionInfo, hub_id_of, info_from_train_config, \
    point_usage_at, render_model_card, write_model_card


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(tiny_model_path, device="cpu")


def _card(tiny, tmp_path, **kw):
    cfg = TrainConfig(data=["a.jsonl", "b.jsonl"], strategy="tdro", max_steps=7, learning_rate=3e-5, lora_r=0)
    weights = {"strategy": "tdro", "collections": ["alpha", "beta"], "weights": [0.125, 0.875]}
    info = info_from_train_config(cfg, names=["alpha", "beta"], sizes=[120, 40], weights=weights,
                                  command="drmix train c.yaml --max-steps 7",
                                  eval_results={"scifact": {"ndcg@10": 0.6125, "recall@100": 0.9}},
                                  eval_split="test", **kw)
    path = write_model_card(tiny, tmp_path / "model", info)
    return path, path.read_text(encoding="utf-8")


def test_front_matter_names_base_model_datasets_metrics_and_tags(tiny, tmp_path):
    path, text = _card(tiny, tmp_path)
    meta = ModelCard.load(path).data.to_dict()
    assert meta["base_model"] == DEFAULT_HUB_ID  # model: null trains the bundled all-MiniLM-L6-v2
    assert "datasets" not in meta          # local collections: their names are not Hub dataset ids
    assert meta["metrics"] == ["ndcg@10", "recall@100"]
    assert {"sentence-transformers", "generated_from_drmix", "mixture:learned-tdro", "loss:InfoNCE"} <= set(meta["tags"])
    results = meta["model-index"][0]["results"][0]
    assert results["dataset"]["name"] == "scifact"
    assert {m["type"]: m["value"] for m in results["metrics"]} == {"ndcg@10": 0.6125, "recall@100": 0.9}
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"


def test_body_has_mixture_sizes_weights_loss_hyperparameters_command_and_papers(tiny, tmp_path):
    _, text = _card(tiny, tmp_path)
    assert "| alpha | 120 | 0.7500 | 0.1250 |" in text  # size, share of the 160 examples, final weight
    assert "| beta | 40 | 0.2500 | 0.8750 |" in text
    assert "learned by task-level DRO (tDRO)" in text
    assert "InfoNCE" in text and '"temperature": 0.05' in text
    assert "- `learning_rate`: 3e-05" in text.split("#### Non-Default Hyperparameters")[1].split("####")[0]
    assert "- `max_steps`: 7" in text
    assert "```bash\ndrmix train c.yaml --max-steps 7\n```" in text
    assert "eprint = {2408.10613}" in text and "reimers-2019-sentence-bert" in text
    # the resolved configuration reproduces the run
    block = text.split("```yaml\n")[1].split("```")[0]
    assert yaml.safe_load(block)["optim"]["learning_rate"] == 3e-5   # as config.yaml holds it
    # sentence-transformers' sections are all there, in their order
    order = ["## Model Details", "## Usage", "## Evaluation", "## Training Details", "### Training Mixture",
             "### Training Hyperparameters", "## Citation"]
    positions = [text.index(h) for h in order]
    assert positions == sorted(positions)


def test_base_model_hub_id_only_for_hub_models(tmp_path, tiny_model_path):
    assert hub_id_of(None) == DEFAULT_HUB_ID
    assert hub_id_of("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"
    assert hub_id_of(tiny_model_path) is None  # a local folder is named in the body, not as a Hub id


def test_local_base_model_and_no_eval(tiny, tmp_path, tiny_model_path):
    info = CardInfo(base_model=tiny_model_path, kind="pruned", summary="Pruned to 2 layers.",
                    notes=["kept layers: 0, 1"], collections=[CollectionInfo("c", 3, None)])
    text = render_model_card(tiny, info)
    meta = yaml.safe_load(text.split("---")[1])
    assert "base_model" not in meta and "metrics" not in meta and "datasets" not in meta
    assert "Pruned to 2 layers." in text and "kept layers: 0, 1" in text
    assert "## Evaluation" not in text


def test_usage_snippet_loads_the_real_folder_or_the_repository(tiny, tmp_path):
    _, text = _card(tiny, tmp_path)   # output_dir runs/train
    assert "sentence_transformers_model_id" not in text
    assert '# Load the model folder drmix wrote\nmodel = SentenceTransformer("runs/train/model")' in text
    info = CardInfo(base_model=None, model_id="me/my-retriever")
    assert '# Download from the 🤗 Hub\nmodel = SentenceTransformer("me/my-retriever")' in render_model_card(tiny, info)
    cfg = TrainConfig(data=["a.jsonl"], push_to_hub="me/pushed", output_dir="out/x")
    pushed = info_from_train_config(cfg, names=["a"], sizes=[3])
    assert 'SentenceTransformer("me/pushed")' in render_model_card(tiny, pushed)
    # drmix push points a local card at the repository
    assert point_usage_at(text, "me/later").count('SentenceTransformer("me/later")') == 1
    assert '# Download from the 🤗 Hub\nmodel = SentenceTransformer("me/later")' in point_usage_at(text, "me/later")


def test_only_hub_collections_are_listed_as_datasets(tiny, tmp_path):
    data = tmp_path / "local.jsonl"
    data.write_text("{}")
    _, text = _card(tiny, tmp_path, sources=[str(data), "sentence-transformers/msmarco-bm25:triplet:train"])
    meta = yaml.safe_load(text.split("---")[1])
    assert meta["datasets"] == ["sentence-transformers/msmarco-bm25"]
    assert "| alpha | 120 |" in text and "| beta | 40 |" in text     # both named in the body


@pytest.mark.parametrize("given, tag", [
    ({}, "mixture:static-uniform"),
    ({"mixture": "temperature"}, "mixture:static-temperature"),
    ({"strategy": "groupdro", "batching": "mixed"}, "mixture:learned-groupdro"),
    ({"mixture": "file", "weights_file": "LEARNED", "transfer": "top:0.7"}, "mixture:transferred"),
    ({"mixture": "file", "weights_file": "LEARNED"}, "mixture:transferred"),
    ({"mixture": "file", "weights_file": "HAND"}, "mixture:static-file"),
])
def test_mixture_tag_says_what_the_weights_were(tmp_path, given, tag):
    from drmix.report.card import mixture_tag

    learned, hand = tmp_path / "learned.json", tmp_path / "hand.json"
    learned.write_text(json.dumps({"strategy": "tdro", "collections": ["a"], "weights": [1.0]}))
    hand.write_text(json.dumps({"a": 1.0}))
    given = {k: {"LEARNED": str(learned), "HAND": str(hand)}.get(v, v) for k, v in given.items()}
    assert mixture_tag(TrainConfig(data=["a.jsonl"], **given).flat()) == tag


def test_card_facts_round_trip_and_refresh_with_later_evaluations(tiny, tmp_path):
    from drmix.report.card import CARD_FACTS, refresh_card

    cfg = TrainConfig(data=["a.jsonl"], strategy="tdro", matryoshka_dims=[16], output_dir=str(tmp_path))
    info = info_from_train_config(cfg, names=["a"], sizes=[3], sources=["a.jsonl"])
    assert CardInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    tiny.save(str(tmp_path / "model"))
    (tmp_path / CARD_FACTS).write_text(json.dumps(info.to_json()))
    assert refresh_card(tmp_path, model=tiny) is None                  # no evaluation yet: card left as it is
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(
        {"split": "test", "results": {"scifact": {"ndcg@10": 0.5, "recall@100": 0.75}}}))
    path = refresh_card(tmp_path, model=tiny)
    meta = ModelCard.load(path).data.to_dict()
    results = meta["model-index"][0]["results"][0]
    assert {m["type"]: m["value"] for m in results["metrics"]} == {"ndcg@10": 0.5, "recall@100": 0.75}


def test_sampled_evaluation_is_named_as_a_sample_in_the_card_and_model_index(tiny, tmp_path):
    from drmix.report.card import CARD_FACTS, refresh_card

    cfg = TrainConfig(data=["a.jsonl"], output_dir=str(tmp_path))
    tiny.save(str(tmp_path / "model"))
    (tmp_path / CARD_FACTS).write_text(json.dumps(info_from_train_config(cfg, names=["a"], sizes=[3]).to_json()))
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps(
        {"split": "test", "results": {"scifact": {"ndcg@10": 0.5}},
         "info": {"scifact": {"queries": 100, "documents": 1500,
                              "subsample": {"of_queries": 300, "of_documents": 5183, "seed": 0}}}}))
    path = refresh_card(tmp_path, model=tiny)
    label = "scifact (sample: 100 of 300 queries, 1,500 of 5,183 documents)"
    meta = ModelCard.load(path).data.to_dict()
    assert [r["dataset"]["name"] for r in meta["model-index"][0]["results"]] == [label]
    body = path.read_text(encoding="utf-8").split("\n---\n", 1)[1]
    assert "sample: 100 of 300 queries" in body and "| scifact |" not in body


def test_transferred_weights_say_where_they_were_learned(tiny, tmp_path):
    wf = tmp_path / "weights.json"
    wf.write_text(json.dumps({"strategy": "doremi", "collections": ["a", "b"], "weights": [0.3, 0.7]}))
    cfg = TrainConfig(data=["a.jsonl", "b.jsonl"], weights_file=str(wf), transfer="top:0.7", mixture="file")
    info = info_from_train_config(cfg, names=["a", "b"], sizes=[5, 5], weights=None, command=None)
    assert "transferred (top:0.7) from weights learned by doremi" in info.weights_how
    assert "doremi" in [p.key for p in info.papers]


def test_made_from_lists_each_input_by_content(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "train.jsonl"
    data.write_text('{"query": "q", "positive": "p"}\n' * 20)
    cfg = TrainConfig(data=[str(data), str(tmp_path / "gone.jsonl")], max_steps=1)
    info = info_from_train_config(cfg, names=["train"], sizes=[20])
    [(key, fp)] = [(k, v) for k, v in info.made_from.items() if v["field"] == "data"]
    assert key == f"data {data}" and fp["rows"] == 20 and fp["bytes"] == 20 * 32 and fp["kind"] == "file"
    text = render_model_card(tiny, info)
    section = text.split("### Made from")[1].split("###")[0]
    assert f"| data | {data} | blake2b-160 {fp['digest'][:16]}, 640 bytes, 20 rows |" in section
    assert "gone.jsonl" not in section                       # a path with nothing at it is no input
    assert CardInfo.from_json(json.loads(json.dumps(info.to_json()))).made_from == info.made_from


def test_dataset_columns_are_the_rows_columns(tiny, tmp_path):
    """A collection of drmix rows with a negatives list says so (not "query, positive, and negative")."""
    info = CardInfo(collections=[CollectionInfo("docs", 12, 1.0, "docs.jsonl", ["query", "positive", "negatives"]),
                                 CollectionInfo("old", 3)], loss="InfoNCE")
    text = " ".join(render_model_card(tiny, info).split())
    assert "* Columns: query, positive, and negatives" in text  # what docs.jsonl's rows hold
    assert "* Columns: query, positives, and negatives" in text  # unknown source: the rows drmix trained on
    assert "* Columns: query, positive, and negative " not in text


def test_evaluated_with_names_what_made_the_scores_and_refresh_hands_it_to_drmix_eval(tiny, tmp_path):
    from drmix.report.card import CARD_FACTS, refresh_card

    source = {"module": "sentence_transformers.sentence_transformer.evaluation.information_retrieval",
              "name": "InformationRetrievalEvaluator", "description": "Information Retrieval"}
    info = CardInfo(eval_results={"toy": {"cosine_ndcg@10": 0.5}, "scifact": {"ndcg@10": 0.25}},
                    evaluated_with={"toy": source})
    text = render_model_card(tiny, info)
    toy, scifact = (text.split(f"* Dataset: `{d}`")[1].split("|")[0] for d in ("toy", "scifact"))
    assert "Evaluated with [<code>InformationRetrievalEvaluator</code>]" in toy and "drmix.eval" not in toy
    assert "Evaluated with <code>drmix.eval</code>" in scifact
    tiny.save(str(tmp_path / "model"))
    (tmp_path / CARD_FACTS).write_text(json.dumps(info.to_json()))
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval.json").write_text(json.dumps({"split": "test", "results": {"toy": {"ndcg@10": 0.75}}}))
    text = refresh_card(tmp_path, model=tiny).read_text(encoding="utf-8")  # toy's scores are drmix eval's now
    assert "Evaluated with <code>drmix.eval</code>" in text and "InformationRetrievalEvaluator" not in text


def test_usage_snippet_encodes_queries_and_documents_apart(tiny, tmp_path):
    """A retriever's card shows encode_query / encode_document, which apply the prompts it was trained with."""
    text = render_model_card(tiny, CardInfo(model_path=str(tmp_path / "model")))
    assert "model.encode_query(queries)" in text and "model.encode_document(documents)" in text


def test_record_given_puts_the_objects_in_place_of_the_fields_they_replaced(tmp_path):
    from drmix.report.card import record_given

    cfg = TrainConfig(evaluator=["nanobeir"], output_dir=str(tmp_path))
    info = info_from_train_config(cfg, names=["train"], sizes=[8])
    record_given(info, {"loss": "MNRL (object)", "evaluator": ["IR dev (object)"], "train_dataset": ["train: 8"]})
    assert info.config["loss"] == "MNRL (object)" and "temperature" not in info.config
    assert info.config["evaluator"] == ["nanobeir", "IR dev (object)"] and info.config["data"] == ["train: 8"]
    assert info.config_file["contrastive"]["loss"] == "MNRL (object)"
    assert not {"temperature", "mask_duplicates", "in_batch_negatives"} & set(info.config_file["contrastive"])
    assert info.config_file["data"]["collections"] == ["train: 8"]
    assert info.config_file["optim"] == cfg.model_dump(mode="json")["optim"]  # the rest as config.yaml holds it
