-- NEXMark q3 as the Flink suite writes it (nexmark/nexmark, Apache License 2.0:
-- nexmark-flink/src/main/resources/queries/q3.sql), its SELECT without the sink.
SELECT
    P.name, P.city, P.state, A.id
FROM
    auction AS A INNER JOIN person AS P on A.seller = P.id
WHERE
    A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
