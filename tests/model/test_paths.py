"""drmix.model.paths: the names that mean the bundled default model, and run directories standing for their model."""
import pytest

from drmix.errors import ModelError
from drmix.model.paths import DEFAULT_ALIASES, default_model_path, is_default_model, resolve_model_path


def test_every_alias_of_the_default_resolves_to_the_bundled_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder named like an alias here
    assert DEFAULT_ALIASES == {"default", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
    for name in (None, *DEFAULT_ALIASES):
        assert resolve_model_path(name) == default_model_path()
        assert is_default_model(name)
    assert is_default_model(default_model_path())
    assert not is_default_model("BAAI/bge-small-en-v1.5") and not is_default_model(str(tmp_path))


def test_a_run_directory_stands_for_its_model_and_a_missing_path_is_refused(tmp_path, monkeypatch):
    import drmix.model.paths as paths

    monkeypatch.setattr(paths, "check_hub_model", lambda repo_id: None)     # the Hub answers (tested in test_encoder)
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path / "run")) == str(tmp_path / "run" / "model")
    assert resolve_model_path("org/name") == "org/name"      # a hub id
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model_path(str(tmp_path / "nowhere"))
