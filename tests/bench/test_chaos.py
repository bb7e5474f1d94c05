"""`python -m bench chaos`'s figures from the lines the cluster tests append, whole and partial
(RECALL_BENCH_CHAOS_ONLY)."""

from __future__ import annotations

from bench import chaos


def test_the_window_is_the_longest_of_every_scenario_run() -> None:
    metrics = chaos.metrics_from([
        {"scenario": "ingest", "unavailable_s": 6.5},
        {"scenario": "reindex+replay", "unavailable_s": 8.8},
        {"scenario": "stall", "unavailable_s": 7.1},
        {"fleet_watch_to_searchable_p50_ms": 200, "fleet_watch_to_searchable_p99_ms": 900},
    ])
    assert metrics == {"failover_unavailable_s": 8.8, "failover_unavailable_s_ingest": 6.5,
                       "failover_unavailable_s_reindex_replay": 8.8,
                       "failover_unavailable_s_stall": 7.1,
                       "fleet_watch_to_searchable_p50_ms": 200,
                       "fleet_watch_to_searchable_p99_ms": 900}


def test_a_partial_run_keeps_the_recorded_rows_of_the_scenarios_it_did_not_run() -> None:
    measured = chaos.metrics_from([{"scenario": "stall", "unavailable_s": 5.0}])
    recorded = {"failover_unavailable_s": 12.7, "failover_unavailable_s_ingest": 6.49,
                "failover_unavailable_s_reindex_replay": 8.77,
                "failover_unavailable_s_stall": 12.7, "chaos_tests_passed": True}
    assert chaos.partial_metrics(measured, recorded) == {
        "failover_unavailable_s_stall": 5.0, "failover_unavailable_s": 8.77}
    slower = chaos.metrics_from([{"scenario": "stall", "unavailable_s": 14.0}])
    assert chaos.partial_metrics(slower, recorded)["failover_unavailable_s"] == 14.0
