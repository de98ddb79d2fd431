"""Encoding-time plans: the arithmetic of drmix index --estimate, against hand-computed values."""
from drmix.retrieval.plan import GPU_PASSAGES_PER_S, START_S, EncodePlan, encode_seconds, estimate_lines


def test_seconds_are_start_plus_the_largest_rank_plus_the_merge():
    assert START_S == 60.0 and GPU_PASSAGES_PER_S == 900.0
    assert encode_seconds(1000, devices=1, rate=10.0) == 60.0 + 100.0
    assert encode_seconds(1000, devices=4, rate=10.0) == 60.0 + 25.0
    assert encode_seconds(1001, devices=4, rate=10.0) == 60.0 + 25.1  # the largest rank holds 251
    # 2 ranks: 500 each, plus reading back 1000 x 250 float32 = 1 MB at 1 GB/s
    assert abs(encode_seconds(1000, devices=2, rate=10.0, dim=250) - (60.0 + 50.0 + 0.001)) < 1e-9
    assert encode_seconds(1000, devices=1, rate=10.0, dim=250) == 160.0  # one process: no merge
    assert abs(EncodePlan(10_000_000, 8, 900.0).hours - (60 + 1_250_000 / 900) / 3600) < 1e-12


def test_estimate_lines_state_the_assumption_and_each_device_count():
    lines = estimate_lines(9_000_000, gpus=(1, 8))
    assert lines[0].startswith("9,000,000 passages at 900 passages/s per GPU (assumed: drmix encode_texts on one "
                               "H200")
    assert lines[1] == "  1 GPU: 2.8 h (2.79 h)"  # 60 + 10,000 s
    assert lines[2] == "  8 GPUs: 21.8 min (0.36 h)"  # 60 + 1,250 s
    given = estimate_lines(600, gpus=(2,), rate=10.0)
    assert "(given with --passages-per-s)" in given[0] and given[1] == "  2 GPUs: 1.5 min (0.03 h)"
    cpu = estimate_lines(46, gpus=(1,), device="cpu")
    assert "23 passages/s per CPU process" in cpu[0] and cpu[1] == "  1 CPU process: 1.0 min (0.02 h)"
    measured = estimate_lines(46, gpus=(1,), rate=46.0, device="cpu", source="measured: m on cpu")
    assert measured[0].startswith("46 passages at 46 passages/s per CPU process (measured: m on cpu), plus 60 s")
