"""CollectionSpec (drmix.data.spec): the column-mapping syntax, NAME:split, and the --format / --columns fields."""
import pytest

from drmix.data.spec import CollectionSpec, apply_instruction, parse_columns, split_suffix


def test_parse_columns_string_mapping_aliases_and_ignore():
    assert parse_columns("query=question, positive=answer,negatives=hard") == {
        "query": "question", "positive": "answer", "negatives": "hard"}
    assert parse_columns({"anchor": "q", "pos_scores": "s", "neg": "a + b"}) == {
        "query": "q", "positive_scores": "s", "negatives": "a+b"}
    assert parse_columns("score=") == {"score": ""}
    assert parse_columns(None) == {} and parse_columns("") == {}


@pytest.mark.parametrize("bad, words", [("query", "ROLE=COLUMN"), ("answer=x", "unknown column role"),
                                        ("query=a,anchor=b", "mapped twice")])
def test_parse_columns_refuses(bad, words):
    with pytest.raises(ValueError, match=words):
        parse_columns(bad)


def test_split_suffix():
    assert split_suffix("data/dd:dev") == ("data/dd", "dev")
    assert split_suffix("owner/name:sub:train[:100]") == ("owner/name:sub", "train[:100]")
    assert split_suffix("data/file.jsonl") == ("data/file.jsonl", None)


def test_collection_spec_fields():
    s = CollectionSpec.model_validate({"path": "x.parquet", "format": "st", "columns": "query=q,positive=p"})
    assert s.format == "st" and s.columns == {"query": "q", "positive": "p"}
    with pytest.raises(Exception):
        CollectionSpec.model_validate({"path": "x", "format": "csv"})


def test_train_config_format_and_columns_flags():
    from drmix.config import CollectionSpec as FromConfig
    from drmix.config import TrainConfig
    from drmix.errors import ConfigError
    from drmix.config import load_config

    assert FromConfig is CollectionSpec                       # config imports it from the data package
    c = TrainConfig(format="flag", columns="query=question,positive=answer")
    assert c.data.format == "flag" and c.data.columns == {"query": "question", "positive": "answer"}
    assert TrainConfig().data.format == "auto" and TrainConfig().data.columns == {}
    with pytest.raises(ConfigError, match="columns"):
        load_config(TrainConfig, None, {"columns": "query"})


def test_data_package_does_not_import_config():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "src" / "drmix" / "data"
    for f in root.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "drmix.config", f"{f} imports drmix.config"


def test_apply_instruction():
    assert apply_instruction("query: ", "x") == "query: x" and apply_instruction("Find:", "x") == "Find: x"


@pytest.mark.parametrize("given, name", [("sentence-transformers", "st"), ("Sentence_Transformers", "st"),
                                         ("FlagEmbedding", "flag"), ("st", "st"), ("tevatron", "tevatron")])
def test_format_names_of_the_libraries_are_drmix_names(given, name):
    from drmix.config import TrainConfig
    from drmix.data.spec import format_name

    assert format_name(given) == name
    assert CollectionSpec(path="x", format=given).format == name
    assert TrainConfig(format=given).data.format == name


def test_query_prompt_is_the_collections_instruction():
    assert CollectionSpec(path="x", query_prompt="query: ").instruction == "query: "
    assert CollectionSpec.model_validate({"path": "x", "instruction": "q"}).instruction == "q"
