"""The tables of bench_mixture_stress.py, from its stored results alone (``OUT/results.json``), so that
``--report-only`` prints them byte for byte (tests/benchmarks/test_bench_mixture_stress.py holds the docs' copy).

Per scenario: every arm's nDCG@10 per target and pooled (the mean over the seeds of the mean over both targets'
test queries), its difference to uniform with the paired t-test over the pooled queries (each query's nDCG@10
averaged over the seeds; :func:`drmix.evaluation.significance.paired_summary`), the per-seed differences and
the share of the oracle's gain it recovers (bench_adapt.py's :func:`gain_bootstrap`: seeds and queries
resampled together, 10,000 times, seeded). Then the audit's verdicts, its signals' agreement with leave-one-out,
the weight every method put on the harmful set, and the issue's goals.
"""
from __future__ import annotations

import math

import numpy as np

TARGETS = ("scifact", "nfcorpus")
SCENARIOS = ("clean", "noisy", "offtask", "flood")
BAD = {"noisy": "noisy_xquad", "offtask": "xquad_answers", "flood": "flood_walmart_amazon"}
ABOUT = {"clean": "the six sources alone, the control",
         "noisy": "noisy_xquad, a copy of XQuAD with half its positives shuffled",
         "offtask": "xquad_answers, XQuAD's questions paired with their answer strings",
         "flood": "flood_walmart_amazon, Walmart-Amazon repeated to 10x the largest other collection"}
SIGNAL_NAMES = {"tdro": "tDRO weight", "doremi": "DoReMi excess loss", "groupdro": "GroupDRO weight",
                "infdds": "Inf-DDS influence", "gradalign": "gradient alignment"}
WEIGHT_ARMS = ("size", "temperature", "tdro:reweight", "doremi:reweight", "groupdro:reweight", "infdds", "audit")
#: the arm of the audit over every seed of a scenario at once (bench_mixture_stress.py's ``pooled_audit``)
POOLED = "audit:pooled"
#: the issue's goals: the gain over uniform in a harmful scenario, the share of the oracle's gain, the loss allowed in
#: the clean control, the share of harmful runs whose verdict names the harmful set, the signals' tau
GAIN, SHARE, CLEAN_LOSS, NAMED, TAU = 0.010, 0.80, -0.003, 5 / 6, 0.5


def _expand(stored: dict) -> dict:
    return {a: {d: dict(zip(stored["queries"][d], v)) for d, v in by.items()} for a, by in stored["scores"].items()}


def _pooled(run: dict) -> dict:
    return {f"{d}/{q}": v for d, qs in run.items() for q, v in qs.items()}


def _mean(run: dict) -> float:
    return float(np.mean(list(_pooled(run).values())))


def _p(p: float) -> str:
    return "–" if not math.isfinite(p) else f"{p:.2g}"


def _signed(x: float) -> str:
    return f"{x:+.4f}"


def cells_of(stored: dict) -> dict[str, dict[int, dict]]:
    """``{scenario: {seed: cell}}`` with the test scores expanded; a scenario's audit over all its seeds (``pooled``)
    adds its arm, :data:`POOLED`, to each of its cells, after ``audit``."""
    out: dict[str, dict[int, dict]] = {}
    for key, cell in stored["cells"].items():
        scenario, seed = key.split("/")
        test = _expand(cell["test"])
        pooled = stored.get("pooled", {}).get(scenario, {}).get("test", {}).get(seed)
        if pooled is not None:
            queries = cell["test"]["queries"]
            arm = {d: dict(zip(queries[d], v)) for d, v in pooled.items()}
            test = {k: v for a, run in test.items()
                    for k, v in ((a, run), *(((POOLED, arm),) if a == "audit" else ()))}
        out.setdefault(scenario, {})[int(seed)] = {**cell, "test": test}
    return {s: dict(sorted(out[s].items())) for s in SCENARIOS if s in out}


def versus(cells: dict[int, dict], arm: str, base: str = "uniform") -> dict:
    """``arm`` against ``base`` over the seeds: the paired t over the pooled queries (seed-averaged) and the
    per-seed differences of the pooled means."""
    from drmix.evaluation.significance import paired_summary

    runs = [(_pooled(c["test"][base]), _pooled(c["test"][arm])) for c in cells.values()]
    queries = sorted(set.intersection(*(set(a) & set(b) for a, b in runs)))
    diffs = np.mean([[b[q] - a[q] for q in queries] for a, b in runs], axis=0)
    per_seed = [float(np.mean([b[q] - a[q] for q in queries])) for a, b in runs]
    return {**paired_summary(diffs), "per_seed": per_seed}


def oracle_share(cells: dict[int, dict], arm: str) -> dict | None:
    from bench_adapt import gain_bootstrap

    if any("oracle" not in c["test"] for c in cells.values()):
        return None
    runs = {a: [_pooled(c["test"][a]) for c in cells.values()] for a in ("uniform", arm, "oracle")}
    return gain_bootstrap(runs["uniform"], runs[arm], runs["oracle"])


def _share(g: dict | None) -> str:
    if g is None:
        return "–"
    if g["share"] is None:
        return "n/a (no oracle gain)"
    return f"{g['share']:.0%} [{g['interval'][0]:.0%}, {g['interval'][1]:.0%}]"


def scenario_table(scenario: str, cells: dict[int, dict]) -> list[str]:
    seeds = list(cells)
    first = next(iter(cells.values()))
    arms = [a for a in first["test"] if all(a in c["test"] for c in cells.values())]
    chosen = " / ".join(c["chosen"] for c in cells.values())
    lines = [f"**{scenario}** ({ABOUT[scenario]}), seeds {seeds}; dev-selected chose {chosen}:", "",
             "| arm | scifact | nfcorpus | pooled | Δ vs uniform [95% CI over queries] | p | per-seed Δ | "
             "oracle gain recovered |", "|---|---:|---:|---:|---|---:|---|---|"]
    for arm in arms:
        per_t = [np.mean([np.mean(list(c["test"][arm][t].values())) for c in cells.values()]) for t in TARGETS]
        pooled = np.mean([_mean(c["test"][arm]) for c in cells.values()])
        cells_txt = [f"{x:.4f}" for x in per_t] + [f"{pooled:.4f}"]
        if arm == "uniform":
            cells_txt += ["—", "", "", ""]
        else:
            v = versus(cells, arm)
            cells_txt += [f"{_signed(v['mean'])} [{_signed(v['low'])}, {_signed(v['high'])}]", _p(v["p"]),
                          " / ".join(_signed(x) for x in v["per_seed"]),
                          "" if arm == "oracle" else _share(oracle_share(cells, arm))]
        lines.append(f"| {arm} | " + " | ".join(cells_txt) + " |")
    return lines


def audit_table(by_scenario: dict[str, dict[int, dict]], pooled: dict) -> list[str]:
    lines = ["The audit in every run: its verdict on the harmful set, what else it dropped or down-weighted, and "
             "Kendall's tau of each cheap signal against its leave-one-out values (* = the signal voted: tau > 0)"
             + ("; seed `all`: the audit over every seed's runs at once (what `--seeds N` answers), whose weights the "
                f"`{POOLED}` arm trains with." if pooled else "."),
             "", "| scenario | seed | harmful set: leave-one-out value [95% CI] | verdict | others not kept | "
             + " | ".join(SIGNAL_NAMES.values()) + " |", "|---|---:|---|---|---|" + "---:|" * len(SIGNAL_NAMES)]
    for scenario, seed, a in audit_rows(by_scenario, pooled):
        bad = a.get("harmful")
        value = (f"{_signed(a['loo'][bad]['mean'])} [{_signed(a['loo'][bad]['low'])}, "
                 f"{_signed(a['loo'][bad]['high'])}]") if bad else "–"
        others = [f"{n} ({v})" for n, v in a["verdicts"].items() if v != "keep" and n != bad]
        taus = [("–" if s not in a["agreement"] or not math.isfinite(a["agreement"][s]["tau"]) else
                 f"{a['agreement'][s]['tau']:+.2f}" + ("*" if s in a["voters"] else "")) for s in SIGNAL_NAMES]
        lines.append(f"| {scenario} | {seed} | {value} | {a['verdicts'][bad] if bad else '–'} | "
                     f"{', '.join(others) or 'none'} | " + " | ".join(taus) + " |")
    return lines


def audit_rows(by_scenario: dict[str, dict[int, dict]], pooled: dict) -> list[tuple[str, str, dict]]:
    """``(scenario, seed label, audit record)`` of every audit: each cell's one-seed audit, then each scenario's
    audit over all its seeds (seed label ``all``)."""
    rows = [(sc, str(seed), c["audit"]) for sc, cells in by_scenario.items() for seed, c in cells.items()]
    return rows + [(sc, "all", pooled[sc]["audit"]) for sc in by_scenario if sc in pooled]


def weights_table(by_scenario: dict[str, dict[int, dict]], pooled: dict) -> list[str]:
    if not any(s in BAD for s in by_scenario):
        return []
    arms = WEIGHT_ARMS + ((POOLED,) if pooled else ())
    lines = ["Weight on the harmful set (mean over seeds; the uniform share is 1/7 = 0.1429; Inf-DDS: its mean "
             "policy over the run; ↑ above uniform).", "",
             "| scenario | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    for scenario, cells in by_scenario.items():
        bad = BAD.get(scenario)
        if bad is None:
            continue
        row = []
        for arm in arms:
            got = [c["weights"].get(arm, {}).get(bad) for c in cells.values()]
            if arm == "audit":
                got = [c["audit"]["weights"].get(bad) for c in cells.values()]
            if arm == POOLED:
                got = [pooled[scenario]["audit"]["weights"].get(bad)] if scenario in pooled else []
            got = [g for g in got if g is not None]
            row.append("–" if not got else f"{np.mean(got):.4f}" + (" ↑" if np.mean(got) > 1 / 7 + 1e-9 else ""))
        lines.append(f"| {scenario} | " + " | ".join(row) + " |")
    return lines


def trajectory_table(by_scenario: dict[str, dict[int, dict]]) -> list[str]:
    """Why each learned method weighted the harmful set as it did: what it measured of it against the mean of the
    other collections, over its run (means over the steps, then over the seeds)."""
    lines = ["What each learned method measured of the harmful set over its run, against the mean of the other "
             "collections (stage 1 of tDRO, DoReMi and GroupDRO: the proxy's and the reference's loss and the "
             "measurement their update adds, mean over the steps; Inf-DDS: its reward, mean over the updates), and "
             "its weight on the harmful set at the first and the last step (mean over seeds).", "",
             "| scenario | method | proxy loss: harmful / others | reference loss: harmful / others | "
             "measurement or reward: harmful / others | weight: first → last |", "|---|---|---|---|---|---|"]

    def pair(cells: dict, method: str, bad: str, key: str) -> str:
        h, o = [], []
        for c in cells.values():
            t = c.get("trajectories", {}).get(method, {})
            if bad not in t or t[bad].get(key) is None:
                return "–"
            h.append(t[bad][key])
            o.append(np.mean([v[key] for n, v in t.items() if n != bad and v.get(key) is not None]))
        return f"{np.mean(h):.4g} / {np.mean(o):.4g}"

    for scenario, cells in by_scenario.items():
        bad = BAD.get(scenario)
        if bad is None or not any(c.get("trajectories") for c in cells.values()):
            continue
        for method in ("tdro", "doremi", "groupdro", "infdds"):
            got = [c["trajectories"][method][bad] for c in cells.values() if method in c.get("trajectories", {})]
            if not got:
                continue
            key = "rewards" if method == "infdds" else "measurement"
            lines.append(f"| {scenario} | {method} | {pair(cells, method, bad, 'proxy_loss')} | "
                         f"{pair(cells, method, bad, 'reference_loss')} | {pair(cells, method, bad, key)} | "
                         f"{np.mean([g['first'] for g in got]):.4f} → {np.mean([g['last'] for g in got]):.4f} |")
    return lines


def named_line(audits: list[dict], what: str) -> str:
    """How many of ``audits`` (harmful scenarios only) named the harmful set, against the goal."""
    named = sum(1 for a in audits if a["verdicts"][a["harmful"]] != "keep")
    dropped = sum(1 for a in audits if a["verdicts"][a["harmful"]] == "drop")
    return (f"The {what} named the harmful set (drop or down-weight) in {named} of {len(audits)} harmful runs "
            f"({dropped} drop), against the goal of at least {NAMED:.0%} "
            f"({'met' if named / len(audits) >= NAMED - 1e-9 else 'missed'}).")


def goals(by_scenario: dict[str, dict[int, dict]], pooled: dict) -> list[str]:
    lines = ["Goals (pooled over SciFact and NFCorpus): in a harmful scenario the audit's weights, or the arm chosen on "
             "dev, beat uniform by at least +0.0100 (p < 0.05 over queries, ahead in every seed) and recover at "
             "least 80% of the oracle's gain; in the clean control they stay within −0.0030 of uniform.", "",
             "| scenario | arm | Δ vs uniform | p | ahead in every seed | oracle gain recovered | goal |",
             "|---|---|---:|---:|---|---|---|"]
    for scenario, cells in by_scenario.items():
        for arm in ("audit", *((POOLED,) if all(POOLED in c["test"] for c in cells.values()) else ()), "dev-selected"):
            v = versus(cells, arm)
            ahead = all(x > 0 for x in v["per_seed"])
            if scenario in BAD:
                g = oracle_share(cells, arm)
                share_ok = g is not None and g["share"] is not None and g["share"] >= SHARE
                met = v["mean"] >= GAIN and v["p"] < 0.05 and ahead and share_ok
                share = _share(g)
            else:
                met, share = v["mean"] >= CLEAN_LOSS, "–"
            lines.append(f"| {scenario} | {arm} | {_signed(v['mean'])} | {_p(v['p'])} | {'yes' if ahead else 'no'} | "
                         f"{share} | {'met' if met else 'missed'} |")
    harmful = [c["audit"] for s, cells in by_scenario.items() if s in BAD for c in cells.values()]
    runs = [c["audit"] for cells in by_scenario.values() for c in cells.values()]
    if harmful:
        lines += ["", named_line(harmful, "one-seed audit's verdict")]
        over = [pooled[s]["audit"] for s in by_scenario if s in BAD and s in pooled]
        if over:
            lines.append(named_line(over, "verdict of the audit over all seeds"))
    taus = {s: [a["agreement"][s]["tau"] for a in runs if s in a["agreement"] and math.isfinite(a["agreement"][s]["tau"])]
            for s in SIGNAL_NAMES}
    parts = [f"{SIGNAL_NAMES[s]} {np.mean(t):+.2f} (at least 0.5 in {sum(x >= TAU for x in t)} of {len(t)})"
             for s, t in taus.items() if t]
    if parts:
        best = max((s for s in taus if taus[s]), key=lambda s: np.mean(taus[s]))
        lines.append(("" if harmful else "\n") + f"Kendall's tau against leave-one-out, mean over the {len(runs)} runs: " + "; ".join(parts)
                     + f". The goal, tau ≥ 0.5, is {'met' if np.mean(taus[best]) >= TAU else 'missed'} on average by "
                       f"the best signal ({SIGNAL_NAMES[best]}).")
    return lines


def report(stored: dict) -> str:
    by_scenario = cells_of(stored)
    seeds = sorted({seed for cells in by_scenario.values() for seed in cells})
    s = stored.get("settings", {})
    lines = [f"Preset `{stored.get('preset')}`, seeds {seeds}: every arm {s.get('steps')} steps x {s.get('batch_size')} "
             f"at learning rate {s.get('lr')}, lengths {s.get('query_len')}/{s.get('doc_len')}; the audit's runs "
             f"the same, stage 1 {s.get('stage1_steps')} steps x {s.get('stage1_batch_size')}. nDCG@10 on the SciFact "
             "and NFCorpus test splits (never trained on, read only by this evaluation).", ""]
    for scenario, cells in by_scenario.items():
        lines += scenario_table(scenario, cells) + [""]
    pooled = {sc: p for sc, p in stored.get("pooled", {}).items() if sc in by_scenario}
    weights = weights_table(by_scenario, pooled)
    lines += audit_table(by_scenario, pooled) + [""] + (weights + [""] if weights else [])
    trajectory = trajectory_table(by_scenario)
    lines += (trajectory + [""] if len(trajectory) > 4 else []) + goals(by_scenario, pooled)
    return "\n".join(lines) + "\n"
