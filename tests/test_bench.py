"""The benchmark's plumbing (never its timings: a benchmark is not a test)."""

import pytest

from trilinear_bwd import bench

TINY = ("tiny", (1, 2), (3, 4, 5), (6, 8, 10), "ndhwc", "float32", False)


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_measure_reports_every_contender(cache, monkeypatch):
    monkeypatch.setattr(bench, "EVICT_BYTES", 2**20)
    calls = []
    real = bench._evicter

    def counting(mode):
        prepare = real(mode)

        def wrapped(run):
            calls.append(run)
            prepare(run)

        return wrapped

    monkeypatch.setattr(bench, "_evicter", counting)
    r = bench.measure(TINY, repeat=3, num_threads=2, with_torch=False, cache=cache)
    assert r["ours_s"] > 0 and r["ours_1t_s"] > 0 and "torch_s" not in r
    assert r["bytes"] == 4 * 2 * (6 * 8 * 10 + 3 * 4 * 5)
    assert len(calls) == 3 * 2  # every timed call is prepared first


def test_unknown_cache_mode_is_refused():
    with pytest.raises(ValueError, match="cache must be"):
        bench._evicter("lukewarm")


def test_report_renders_as_a_table(monkeypatch):
    monkeypatch.setattr(bench, "EVICT_BYTES", 2**20)
    report = bench.run_benchmark([TINY], repeat=1, with_torch=False, bandwidth=1e10)
    table = bench.format_table(report)
    assert table.splitlines()[2].startswith("| tiny | NDHWC | float32 |")
    assert "cold caches" in table
