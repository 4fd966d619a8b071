-- NEXMark q22 as the Flink suite writes it (nexmark/nexmark, Apache License 2.0:
-- nexmark-flink/src/main/resources/queries/q22.sql), its SELECT without the sink.
SELECT
    auction, bidder, price, channel,
    SPLIT_INDEX(url, '/', 3) as dir1,
    SPLIT_INDEX(url, '/', 4) as dir2,
    SPLIT_INDEX(url, '/', 5) as dir3 FROM bid
