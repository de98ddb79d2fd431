"""``drmix mixture audit`` end to end on the tiny model: the runs, the answer, reuse, refusal, the estimate."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit_inputs import write_inputs
from drmix.recipes.audit import AuditConfig, estimate_audit, run_audit


@pytest.fixture()
def config(tmp_path, tiny_model_path) -> AuditConfig:
    train, dev = write_inputs(tmp_path)
    return AuditConfig(model=tiny_model_path, data=[str(train)], dev=[str(dev)], output_dir=str(tmp_path / "audit"),
                       budget_steps=4, batch_size=4, learning_rate=1e-3, warmup_ratio=0.0, query_max_length=16,
                       doc_max_length=16, log_every=1, save_every=100, show_progress=False, seed=3, device="cpu",
                       probe_points=2, probe_draws=2, stage1_temperature=0.05, stage1_miner=tiny_model_path,
                       signals=["tdro", "infdds", "gradalign"])


def test_the_audit_writes_its_answer_and_reuses_its_runs(config, caplog):
    result = run_audit(config)
    root = Path(config.run.output_dir)
    names = ["animals", "food", "tools"]
    assert result.analysis.names == names
    # k + 1 runs a seed and the tDRO stage 1 with the seed's whole-mixture model as its reference
    runs = root / "runs" / "seed3"
    assert sorted(p.name for p in runs.iterdir()) == ["all", "without-animals", "without-food", "without-tools"]
    s1 = json.loads(json.dumps(__import__("yaml").safe_load((root / "stage1" / "tdro-seed3" / "config.yaml").read_text())))
    assert s1["mixture"]["reference_model"] == str(runs / "all" / "model")
    assert s1["data"]["collections"][0]["path"].startswith(str(root / "negatives"))  # mined once, for stage 1
    # each leave-one-out run trains on the others only
    loo = __import__("yaml").safe_load((runs / "without-food" / "config.yaml").read_text())
    assert [Path(p).stem for p in loo["data"]["collections"]] == ["animals", "tools"]
    assert loo["optim"]["max_steps"] == 4
    # the value is the whole mixture's dev scores minus the run's without it, query by query
    scores = {lb: json.loads((Path(m).parent / "audit-dev.json").read_text())["per_query"]
              for lb, m in (("all", runs / "all" / "model"), ("without", runs / "without-food" / "model"))}
    diffs = [scores["all"]["dev"][q]["ndcg@10"] - scores["without"]["dev"][q]["ndcg@10"] for q in scores["all"]["dev"]]
    assert result.analysis.loo["food"].mean == pytest.approx(sum(diffs) / len(diffs))
    # the probe measured every collection at both points, twice
    probe = json.loads((runs / "all" / "weights.json").read_text())["signals"]
    assert probe["points"] == [1, 3] and all(len(probe["influence"][n]) == 4 for n in names)
    # the recommended weights are a weights file drmix train reads
    from drmix.mixture.static import file_mixture_weights

    w = file_mixture_weights(str(result.weights_path), names)
    assert w.sum() == pytest.approx(1.0)
    assert list(w) == pytest.approx([result.weights[n] for n in names])
    summary = json.loads((root / "summary.json").read_text())
    assert set(summary["verdicts"].values()) <= {"keep", "down-weight", "drop"}
    assert set(summary["agreement"]) == {"tdro", "infdds", "gradalign"}
    assert (root / "audit.png").is_file() and (root / "report.html").is_file()
    assert "## Verdicts" in (root / "summary.md").read_text()
    # a rerun trains nothing
    caplog.clear()
    with caplog.at_level("INFO"):
        again = run_audit(config)
    assert again.verdicts == result.verdicts
    assert not any("running into" in r.message for r in caplog.records)


def test_the_probed_run_trains_exactly_as_the_uniform_mixture(config, tmp_path):
    """The uniform arm of a benchmark can be the audit's whole-mixture run: the probe restores the parameters and
    the random state, so the model is the one plain uniform training makes."""
    from drmix.api import train
    from drmix.recipes.audit.plan import plan_audit

    result = run_audit(config.replace(signals=["infdds"]))
    cfg = plan_audit(config).runs[3]["all"]
    plain = train(cfg.replace(output_dir=str(tmp_path / "plain"), dev=[]))
    from safetensors.torch import load_file

    a = load_file(str(result.output_dir / "runs" / "seed3" / "all" / "model" / "model.safetensors"))
    b = load_file(str(plain.model_dir / "model.safetensors"))
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def test_a_changed_setting_is_refused_and_the_estimate_writes_nothing(config, tmp_path):
    text = estimate_audit(config)
    assert "3 collections, 1 seed(s), 4 steps a run, 4 short runs and 1 stage-1 runs" in text
    for stage in ("seed 3: all", "seed 3: without:food", "seed 3: stage 1 tdro", "dev evaluation", "total"):
        assert f"| {stage} |" in text
    assert not Path(config.run.output_dir).exists()
    run_audit(config.replace(signals=["infdds"]))
    from drmix.train.resume_check import ResumeMismatchError

    with pytest.raises(ResumeMismatchError, match="max_steps 4 -> 5"):
        run_audit(config.replace(signals=["infdds"], budget_steps=5))


@pytest.mark.parametrize("fields, message", [
    ({"max_steps": 50}, "--max-steps (max_steps) is not used by drmix mixture audit"),
    ({"dev": []}, "the audit needs dev sets"),
    ({"mixture": "size"}, "--mixture (mixture) is not used by drmix mixture audit"),
    ({"dev_split": "test"}, "no qrels/test.tsv"),
])
def test_what_the_audit_cannot_run_with_is_refused_before_anything(config, fields, message):
    import re

    from drmix.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        estimate_audit(config.replace(**fields))
    assert not Path(config.run.output_dir).exists()


def test_under_a_launcher_the_runs_train_over_every_rank_and_the_passes_are_sharded(config):
    from drmix.recipes import launch
    from drmix.recipes.audit.plan import plan_audit
    from drmix.recipes.audit.stages import declare

    plan = plan_audit(config)
    hows = {s.name: getattr(s.run, "how", "-") for s in declare(config, plan, lambda r: None)}
    assert hows == {"negatives": launch.SHARDED, "seed 3: all": launch.EVERY, "seed 3: probe": "-",
                    **{f"seed 3: without:{n}": launch.EVERY for n in ("animals", "food", "tools")},
                    "seed 3: stage 1 tdro": launch.SHARDED, "dev evaluation": launch.SHARDED}


def _audit_command(config: AuditConfig, out: Path) -> list[str]:
    c = config
    return ["mixture", "audit", "--model", c.model.name_or_path, *(x for d in c.data.collections for x in ("--data", d)),
            *(x for d in c.mixture.dev for x in ("--dev", d)), "--output-dir", str(out), "--budget-steps", "4", "--batch-size", "4",
            "--learning-rate", "1e-3", "--warmup-ratio", "0", "--query-max-length", "16", "--doc-max-length", "16",
            "--seed", "3", "--device", "cpu", "--probe-points", "2", "--probe-draws", "2",
            "--stage1-temperature", "0.05", "--stage1-miner", c.model.name_or_path, "--signals", "tdro",
            "--signals", "infdds"]


def test_two_gloo_processes_audit_as_one_process_does(config, tmp_path):
    """``torchrun --nproc-per-node 2 -m -- drmix mixture audit`` (gloo on CPU; ``--`` keeps torchrun's own parser
    off ``--signals``): rank 0 runs the stages, rank 1 trains and encodes beside it and writes nothing; the
    values, verdicts and weights are one process's (the global batch is one process's, so to rounding)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    one = subprocess.run([sys.executable, "-m", "drmix", *_audit_command(config, tmp_path / "one")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "--", "drmix", *_audit_command(config, tmp_path / "two")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("summary: ") == 1 and two.stdout.count("| food |") == one.stdout.count("| food |")
    assert two.stderr.count("seed 3: without:food: running into") == 1      # the stage runner is rank 0's alone
    a, b = (json.loads((tmp_path / r / "summary.json").read_text()) for r in ("one", "two"))
    assert b["verdicts"] == a["verdicts"] and b["weights"] == pytest.approx(a["weights"])
    assert b["dev"] == pytest.approx(a["dev"], abs=1e-6)                     # every run's dev nDCG@10
    for n, v in a["leave_one_out"].items():
        assert b["leave_one_out"][n]["mean"] == pytest.approx(v["mean"], abs=1e-6), n
    files = lambda r: sorted(str(p.relative_to(tmp_path / r)) for p in (tmp_path / r).rglob("*") if p.is_file()
                             and "checkpoint" not in str(p))
    assert files("two") == files("one") and not (tmp_path / "two" / "shards").exists()
