-- NEXMark q10 as the Flink suite writes it (nexmark/nexmark, Apache License 2.0:
-- nexmark-flink/src/main/resources/queries/q10.sql), its SELECT without the sink.
SELECT auction, bidder, price, `dateTime`, extra, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd'), DATE_FORMAT(`dateTime`, 'HH:mm')
FROM bid
