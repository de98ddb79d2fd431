"""A Hub model id that cannot be loaded here fails at once, with the reason, instead of after the Hub's retries."""
import time

import pytest

from drmix.errors import ModelError
from drmix.model import encoder


def test_an_uncached_hub_id_fails_in_offline_mode(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    t = time.perf_counter()
    with pytest.raises(ModelError, match="not in the Hugging Face Hub cache.*switched off"):
        encoder.resolve_model_path("nobody-here/no-such-model")
    assert time.perf_counter() - t < 5


def test_an_uncached_hub_id_fails_when_the_hub_cannot_be_reached(monkeypatch):
    from huggingface_hub import constants

    import drmix.data.formats.sources as sources

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "hub_unreachable", lambda timeout=5.0: "https://hub cannot be reached: no route")
    with pytest.raises(ModelError, match="cannot be used: https://hub cannot be reached"):
        encoder.resolve_model_path("nobody-here/no-such-model")
    monkeypatch.setattr(sources, "hub_unreachable", lambda timeout=5.0: None)   # reachable: left to the loader
    assert encoder.resolve_model_path("nobody-here/no-such-model") == "nobody-here/no-such-model"


def test_a_cached_hub_id_is_not_checked(monkeypatch, tmp_path):
    from huggingface_hub import constants

    import huggingface_hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, f: str(tmp_path / f))
    assert encoder.resolve_model_path("someone/cached") == "someone/cached"
