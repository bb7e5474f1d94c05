"""`python -m bench scale` end to end on a tiny corpus: every figure of a size is produced, the
giant session's views answer, and the growth curves are drawn."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from bench import scale


def test_corpus_parts_nest_so_each_size_holds_the_smaller_ones() -> None:
    assert scale.parts(200) == [200]
    assert scale.parts(2000) == [200, 1800]
    assert scale.parts(20_000) == [200, 1800, 18_000]
    assert scale.parts(4) == [4]


def test_sizes_reject_a_size_that_is_not_whole_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_BENCH_SCALE_SIZES", "1m,750")
    with pytest.raises(SystemExit, match="750"):
        scale.sizes()


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-size run of 1,000 events (two sessions) and one giant of 600, in `tmp_path`,
    without plots."""
    monkeypatch.setenv("RECALL_BENCH_DIR", str(tmp_path / "bench"))
    monkeypatch.setenv("RECALL_BENCH_SCALE_SIZES", "1000")
    monkeypatch.setenv("RECALL_BENCH_GIANTS", "1")
    monkeypatch.setenv("RECALL_BENCH_GIANT_EVENTS", "600")
    monkeypatch.setenv("RECALL_BENCH_SCALE_PLOT", "0")


@pytest.mark.usefixtures("tiny")
def test_a_tiny_scale_run_reports_every_figure_and_draws_the_curves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_BENCH_SCALE_QUERIES", "6")
    monkeypatch.setattr(scale, "RUNS", 1)
    # full collections before each timing steady the real run; here they only cost time
    monkeypatch.setattr(gc, "collect", lambda *_: 0)
    out = scale.run()
    assert out["scale_corpus_sessions_1k"] == 2
    assert out["scale_ingest_events_per_s_1k"] > 0
    assert out["scale_ingest_peak_rss_mb_1k"] > 10  # a Python interpreter's, at least
    assert out["scale_index_bytes_per_text_byte_1k"] > 0
    for key in ("scale_search_p50_ms_rare_1k", "scale_search_p99_ms_common_1k",
                "scale_search_cold_ms_1k", "scale_speedup_vs_ripgrep_1k", "list_sessions_ms_2",
                "list_sessions_title_ms_2", "ui_sessions_page_ms_2", "mcp_candidates_ms_2",
                "reference_prepare_ms_giant_1k"):
        assert out[key] > 0, key
    for view in ("surface", "show", "events", "web", "trace", "trace_event"):
        assert out[f"giant_session_first_page_ms_{view}_1k"] > 0, view

    # the curves, from figures of two sizes
    results = {f"{k.removesuffix('_1k')}_{size}": v for size in ("100k", "1m")
               for k, v in out.items() if k.endswith("_1k")}
    results |= {"list_sessions_ms_200": 1.0, "list_sessions_ms_2k": 2.0}
    scale.plot(results, tmp_path)
    for _, png in scale.FIGURES:
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.usefixtures("tiny")
def test_an_ingest_only_run_reports_the_ingest_figures_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_BENCH_SCALE_ONLY", "ingest")
    out = scale.run()
    assert out["scale_ingest_events_per_s_1k"] > 0
    assert out["scale_ingest_peak_rss_mb_1k"] > 10
    # the goal names beside them, at a size whose embedded_events_per_s is not bench index's
    assert out["embedded_events_per_s_1k"] == out["scale_ingest_events_per_s_1k"]
    assert out["ingest_peak_rss_mb_1k"] == out["scale_ingest_peak_rss_mb_1k"]
    assert set(out) == {"scale_corpus_sessions_1k", "scale_ingest_events_per_s_1k",
                        "scale_ingest_peak_rss_mb_1k", "embedded_events_per_s_1k",
                        "ingest_peak_rss_mb_1k"}
    assert not (tmp_path / "bench" / "scale-data-1k").exists()


@pytest.mark.usefixtures("tiny")
def test_a_giant_only_run_reports_each_view_first_in_a_fresh_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_BENCH_SCALE_ONLY", "giant")
    out = scale.run()
    for view in ("surface", "show", "events", "web", "trace", "trace_event"):
        assert out[f"giant_session_first_page_ms_{view}_1k"] > 0, view
        assert out[f"giant_session_warm_ms_{view}_1k"] > 0, view
    assert out["reference_prepare_ms_giant_1k"] > 0
    assert out["reference_prepare_warm_ms_giant_1k"] > 0
    assert not any(k.startswith(("scale_", "list_sessions")) for k in out)


@pytest.mark.usefixtures("tiny")
def test_a_search_only_run_measures_a_kept_data_dir_without_ingesting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_BENCH_SCALE_QUERIES", "6")
    monkeypatch.setenv("RECALL_BENCH_SCALE_ONLY", "search")
    with pytest.raises(SystemExit, match="RECALL_BENCH_SCALE_DATA"):
        scale.run()
    data = scale.ingest_figures("1k", 2, scale.ensure_corpus(scale.parts(2)).parts, {},
                                keep=True)
    monkeypatch.setenv("RECALL_BENCH_SCALE_DATA", str(data))
    monkeypatch.setattr(scale, "child_ingest", lambda *_: pytest.fail("ingested"))
    out = scale.run()
    for key in ("scale_search_p50_ms_1k", "scale_search_p99_ms_common_1k",
                "scale_search_cold_ms_1k", "scale_speedup_vs_ripgrep_1k"):
        assert out[key] > 0, key
    # the goal names beside them, at a size whose search figures are not bench index's
    assert out["search_p50_ms_1k"] == out["scale_search_p50_ms_1k"]
    assert out["search_p99_ms_1k"] == out["scale_search_p99_ms_1k"]
    assert out["search_p50_ms_1k_cold"] == out["scale_search_cold_ms_1k"]
    assert not any(k.startswith(("scale_ingest", "scale_index", "list_sessions", "giant_"))
                   for k in out)
