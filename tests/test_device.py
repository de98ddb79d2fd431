"""CPU bf16 support: what torch's probe and /proc/cpuinfo say, and the one line said when bf16 is asked for on a
CPU without bf16 matrix units (the probes mocked: the machine running the tests has whatever it has)."""
from __future__ import annotations

import logging

import pytest
import torch

from drmix import device


@pytest.fixture
def cpu(monkeypatch):
    """Set the CPU: ``cpu(flags, amx=..., avx=..., machine=...)``; torch's probes answer ``amx`` / ``avx``
    (None: torch has no probe, the flags decide)."""
    def make(flags: str, *, amx: bool | None = None, avx: bool | None = None, machine: str = "x86_64") -> None:
        monkeypatch.setattr(device, "cpu_flags", lambda: frozenset(flags.split()))
        for name, value in (("_is_amx_tile_supported", amx), ("_is_avx512_bf16_supported", avx)):
            if value is None:
                monkeypatch.delattr(torch.cpu, name, raising=False)
            else:
                monkeypatch.setattr(torch.cpu, name, lambda v=value: v, raising=False)
        monkeypatch.setattr(device.platform, "machine", lambda: machine)
        monkeypatch.setattr(device, "_warned", set())
    return make


def test_cpu_flags_read_the_flags_line(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **kw: real_open(info if p == "/proc/cpuinfo" else p, *a, **kw))
    assert device.cpu_flags() == frozenset({"fpu", "avx2", "avx512_bf16"})
    info.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 sve\n")
    assert "bf16" in device.cpu_flags()
    info.unlink()
    assert device.cpu_flags() == frozenset()


def test_bf16_is_fast_with_amx_or_arm_bf16_only(cpu):
    cpu("avx2 avx512f avx512_bf16", amx=False, avx=True)  # a CPU like this machine's: bf16 dot products, no AMX
    assert device.cpu_bf16() == {"avx512_bf16": True, "amx": False, "arm_bf16": False, "fast": False}
    cpu("avx512_bf16 amx_tile amx_bf16 amx_int8", amx=True, avx=True)
    assert device.cpu_bf16()["fast"] is True
    cpu("avx512_bf16 amx_tile amx_bf16")  # an older torch without the probes: the flags say it
    assert device.cpu_bf16()["amx"] is True
    cpu("avx2")
    assert device.cpu_bf16() == {"avx512_bf16": False, "amx": False, "arm_bf16": False, "fast": False}
    cpu("fp asimd bf16 sve", machine="aarch64")
    assert device.cpu_bf16()["fast"] is True and device.cpu_bf16()["arm_bf16"] is True


def test_bf16_on_a_cpu_without_units_says_so_once(cpu, caplog):
    cpu("avx2 avx512_bf16", amx=False, avx=True)
    line = device.slow_bf16_line("bf16", "cpu", "pass --precision fp32")
    assert line.startswith("bf16 on a CPU without bf16 matrix units (AVX512-BF16 but no AMX)")
    assert line.endswith("pass --precision fp32 for fp32, or run on a GPU.")
    assert device.slow_bf16_line("no", "cpu", "x") is None  # fp32: nothing to say
    assert device.slow_bf16_line("bf16", "cuda", "x") is None  # a GPU: not this check's business
    with caplog.at_level(logging.WARNING, logger="drmix.device"):
        assert device.warn_slow_bf16("bf16", "cpu", "pass --precision fp32")
        assert device.warn_slow_bf16("bf16", "cpu", "pass --precision fp32")
    assert caplog.text.count("without bf16 matrix units") == 1
    cpu("avx2")
    assert "(no AMX, no AVX512-BF16)" in device.slow_bf16_line("bf16", "cpu", "x")
    cpu("amx_tile amx_bf16", amx=True)
    caplog.clear()
    assert not device.warn_slow_bf16("bf16", "cpu", "x") and caplog.text == ""
