-- NEXMark q12 as the Flink suite writes it (nexmark/nexmark, Apache License 2.0:
-- nexmark-flink/src/main/resources/queries/q12.sql), its SELECT without the sink.
SELECT
    bidder,
    count(*) as bid_count,
    window_start AS starttime,
    window_end AS endtime
FROM TABLE(
        TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end
