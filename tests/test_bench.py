"""The benchmark's plumbing (never its timings: a benchmark is not a test)."""

import pytest

from trilinear_bwd import bench
from trilinear_bwd._bench import _kernel

TINY = ("tiny", (1, 2), (3, 4, 5), (6, 8, 10), "ndhwc", "float32", False)


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_measure_reports_every_contender(cache, monkeypatch):
    monkeypatch.setattr(_kernel, "EVICT_BYTES", 2**20)
    calls = []
    real = _kernel._evicter

    def counting(mode):
        prepare = real(mode)

        def wrapped(run):
            calls.append(run)
            prepare(run)

        return wrapped

    monkeypatch.setattr(_kernel, "_evicter", counting)
    r = bench.measure(TINY, repeat=3, num_threads=2, with_torch=False, cache=cache)
    assert r["ours_s"] > 0 and r["ours_1t_s"] > 0 and "torch_s" not in r
    assert r["bytes"] == 4 * 2 * (6 * 8 * 10 + 3 * 4 * 5)
    assert len(calls) == 3 * 2  # every timed call is prepared first


def test_unknown_cache_mode_is_refused():
    with pytest.raises(ValueError, match="cache must be"):
        _kernel._evicter("lukewarm")


def test_report_renders_as_a_table(monkeypatch):
    monkeypatch.setattr(_kernel, "EVICT_BYTES", 2**20)
    report = bench.run_benchmark([TINY], repeat=1, with_torch=False, bandwidth=1e10)
    table = bench.format_table(report)
    assert table.splitlines()[2].startswith("| tiny | NDHWC | float32 |")
    assert "cold caches" in table


def test_variants_are_timed_side_by_side(monkeypatch):
    """--variants: every variant runs in the same rounds, on its own kernel."""
    from trilinear_bwd._core import _dispatch

    variants = _dispatch.available_variants()
    monkeypatch.setattr(_kernel, "EVICT_BYTES", 2**20)
    made = []
    real = _kernel._ours_call

    def recording(*args):
        run = real(*args)
        made.append((args[-1], run))
        return run

    monkeypatch.setattr(_kernel, "_ours_call", recording)
    report = bench.run_benchmark([TINY], repeat=2, with_torch=False, bandwidth=1e10,
                                 variants=variants)
    r = report["results"][0]
    for v in variants[1:]:
        assert r[f"ours_{v}_s"] > 0 and r[f"ours_1t_{v}_s"] > 0
        assert r[f"speedup_over_{v}"] == r[f"ours_{v}_s"] / r["ours_s"]
    assert [v for v, _ in made] == [variants[0], variants[0]] + [
        v for v in variants[1:] for _ in range(2)]
    table = bench.format_table(report)
    assert len(table.splitlines()[0].split("|")) - 2 == 8 + 5 * (len(variants) - 1)
    assert f"kernel variant `{variants[0]}`" in table


def test_forced_variant_is_used_by_executors_made_inside():
    import numpy as np

    import trilinear_bwd as tb
    from trilinear_bwd._core import _dispatch

    g = np.ones((1, 1, 4, 4, 4), np.float32)
    before = _dispatch.kernel_module()
    for v in _dispatch.available_variants():
        with _dispatch.forced(v):
            _, ex = tb.get_workspace_size(g, (4, 4, 4), (1, 1, 2, 2, 2), False, 0, 0, 0,
                                          np.empty((1, 1, 2, 2, 2), np.float32))
        assert ex._runner.variant.__name__ == f"trilinear_bwd._kernels.{v}"   # its runner's
    assert _dispatch.kernel_module() is before


def test_stat_min_reports_the_fastest_round(monkeypatch):
    monkeypatch.setattr(_kernel, "EVICT_BYTES", 2**20)
    times = iter(range(100))
    monkeypatch.setattr(_kernel.time, "perf_counter", lambda: float(next(times)) ** 2)
    r = bench.measure(TINY, repeat=3, num_threads=2, with_torch=False, cache="warm", stat="min")
    # Calls are timed in turn; with a clock at t**2 each later call looks slower,
    # so the minimum is the first round's and the median the second's.
    assert r["ours_s"] < r["ours_1t_s"]
    assert r["ours_s"] == 1.0  # 1**2 - 0**2: the first timed call, ours
    report = bench.run_benchmark([TINY], repeat=1, with_torch=False, bandwidth=1e10,
                                 cache="warm", stat="min")
    assert "min of 1 interleaved rounds" in bench.format_table(report)


def test_calls_table_plumbing(monkeypatch):
    """The headline table's timing loop runs every contender every round; rows render."""
    from trilinear_bwd._bench import _calls, _timing

    monkeypatch.setattr(_timing, "ROUND_SECONDS", 1e-4)
    counts = {"a": 0, "b": 0}

    def bump(name):
        counts[name] += 1

    t = _timing._interleaved({"a": lambda: bump("a"), "b": lambda: bump("b")}, rounds=4)
    assert set(t) == {"a", "b"} and all(v > 0 for v in t.values())
    assert counts["a"] >= 4 + 2 and counts["b"] >= 4 + 2   # warm-up, calibration, rounds
    row = {"call": "one call", "shape": (1, 1, 4, 4, 4), "ours_us": 10.0, "torch_us": 5.0,
           "ratio": 0.5, "target": "<= 3x PyTorch's time", "holds": True}
    table = _calls.format_calls([row, dict(row, holds=False, torch_us=None)])
    assert table.count("\n") == 3 and "| yes |" in table and "| NO |" in table
