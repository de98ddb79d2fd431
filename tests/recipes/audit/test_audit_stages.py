"""The audit's stages: stage 1's mined negatives are mined once per collection file and miner."""
from __future__ import annotations

import json

from audit_inputs import write_inputs
from drmix.recipes.audit import AuditConfig
from drmix.recipes.audit.plan import mined_paths, plan_audit
from drmix.recipes.audit.stages import declare, mine_negatives


def test_mined_negatives_come_from_the_cache_the_second_time(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_mine(collections, n, *, model=None):
        calls.extend(c.name for c in collections)
        for c in collections:
            ds = c.dataset
            c.dataset = ds.remove_columns("negatives").add_column(
                "negatives", [[f"mined {i}"] * n for i in range(len(ds))], feature=ds.features["negatives"])
        return {c.name: {"examples": len(c), "mined": n * len(c)} for c in collections}

    import drmix.recipes.optimize as optimize

    monkeypatch.setattr(optimize, "mine_missing_negatives", fake_mine)
    train, dev = write_inputs(tmp_path)
    plans = []
    for out in ("a", "b"):
        config = AuditConfig(model=tiny_model_path, data=[str(train)], dev=[str(dev)], output_dir=str(tmp_path / out),
                             stage1_miner=tiny_model_path, signals=["tdro"])
        plan = plan_audit(config)
        assert [s.name for s in declare(config, plan, lambda r: None)][:2] == ["negatives", "seed 42: all"]
        report = mine_negatives(config, plan)
        plans.append(plan)
        assert report["food"] == {"examples": 12, "mined": 84}
    assert calls == ["animals", "food", "tools"]            # the second audit mined nothing
    for plan in plans:
        rows = [json.loads(x) for x in open(mined_paths(plan)["food"], encoding="utf-8")]
        assert len(rows) == 12 and rows[3]["negatives"] == ["mined 3"] * 7
    # another miner is another key
    config = AuditConfig(model=tiny_model_path, data=[str(train)], dev=[str(dev)], output_dir=str(tmp_path / "c"),
                         signals=["tdro"])
    mine_negatives(config, plan_audit(config))
    assert calls[3:] == ["animals", "food", "tools"]
