-- NEXMark q0 as the Flink suite writes it (nexmark/nexmark, Apache License 2.0:
-- nexmark-flink/src/main/resources/queries/q0.sql), its SELECT without the sink.
SELECT auction, bidder, price, `dateTime`, extra FROM bid
