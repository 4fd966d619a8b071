-- NEXMark q2 as the Flink suite writes it (nexmark/nexmark, Apache License 2.0:
-- nexmark-flink/src/main/resources/queries/q2.sql), its SELECT without the sink.
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0
