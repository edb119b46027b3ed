"""core/machine.py: the fingerprint written beside builds and registrations, parsed from hand-built cpuinfo."""

from __future__ import annotations

import torch

from rolecast.core import machine
from rolecast.core.machine import machine_fingerprint, parse_cpuinfo

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu vme sse4_2 avx avx2 fma f16c avx512f avx512_vnni rdrand

processor\t: 1
model name\t: something else on a hybrid part
flags\t\t: fpu sse4_2
"""


def test_cpuinfo_gives_the_first_processors_model_and_its_vector_flags_in_a_fixed_order():
    model, flags = parse_cpuinfo(CPUINFO)
    assert model == "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
    assert flags == ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni"]  # not fpu, vme, rdrand
    assert parse_cpuinfo("") == (None, [])


def test_the_fingerprint_names_the_kernels_torch_runs_here_and_survives_a_machine_without_cpuinfo(
    tmp_path, monkeypatch
):
    here = machine_fingerprint()
    assert here["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert here["torch"] == torch.__version__ and here["torch_threads"] == torch.get_num_threads()
    monkeypatch.setattr(machine, "CPUINFO", tmp_path / "absent")
    elsewhere = machine_fingerprint()
    assert elsewhere["vector_flags"] == [] and elsewhere["cpu"]  # the platform's name, or "unknown"
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    monkeypatch.setattr(machine, "CPUINFO", tmp_path / "cpuinfo")
    assert machine_fingerprint()["cpu"].startswith("Intel(R) Xeon(R)")
