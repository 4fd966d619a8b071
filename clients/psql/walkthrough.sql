-- cqgate from psql, step by step. Run it from this folder with the server on its defaults
-- (`cqgate serve`), so that `cqgate push` finds the ingest port:
--
--     psql -X -h 127.0.0.1 -p 55433 -U cq -f walkthrough.sql
--
\set ON_ERROR_STOP on
\pset footer off

-- 1. A table, and a stream that keeps its history (TYPE ARCHIVED).
DROP STREAM IF EXISTS trips CASCADE;
DROP TABLE IF EXISTS zones;
CREATE TABLE zones (zone INT PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO zones VALUES (1, 'Harbour'), (2, 'Old Town');
CREATE STREAM trips (zone INT, fare DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED;

-- 2. Push a CSV file of trips through the ingest port.
\! cqgate push trips trips.csv --quiet

-- 3. A named window, kept by the server: the trips of the last 30 minutes.
CREATE WINDOW last30 AS SELECT zone, fare FROM trips [RANGE '30 minutes'];

-- 4. The window's current contents: a query over named windows is answered at now (the
--    stream's newest event time, 08:48).
SELECT zone, count(*) AS trips, sum(fare) AS fares FROM last30 GROUP BY zone ORDER BY zone;

-- 5. A continuous query, read row by row as its answers come (FETCH_COUNT makes psql read
--    through a cursor). Its window reaches 30 minutes back, so it starts from the archive:
--    the trips in the window now, each valid for 30 minutes from its time. LIMIT 4 ends it.
\set FETCH_COUNT 1
SELECT zone, fare, valid_from, valid_to FROM trips [RANGE '30 minutes'] LIMIT 4;
\unset FETCH_COUNT

-- 6. An aggregate joined with the table, through a cursor of our own. Each answer holds from
--    valid_from to valid_to, so it is sent once it ends: when later trips change it.
BEGIN;
DECLARE busy CURSOR FOR
  SELECT z.name, count(*) AS trips, sum(fare) AS fares, valid_from, valid_to
    FROM trips [RANGE '30 minutes'] t, zones z WHERE t.zone = z.zone GROUP BY z.name;
\! cqgate push trips more.csv --quiet
FETCH 2 FROM busy;
COMMIT;

-- 7. A continuous query runs until its LIMIT, a cancel (Ctrl-C in psql) or a timeout. No
--    fare this high comes, so statement_timeout cancels it after a second.
\set ON_ERROR_STOP off
SET statement_timeout = '1s';
SELECT zone, fare FROM trips WHERE fare > 100;
RESET statement_timeout;
\set ON_ERROR_STOP on

-- 8. How a query runs: EXPLAIN names the engine and shows the temporal algebra.
EXPLAIN SELECT zone, count(*) FROM trips [RANGE '30 minutes'] GROUP BY zone;
