-- JSONBench's PostgreSQL DDL (postgresql/ddl.sql): jsonb with lz4 TOAST compression, expression index over the sort key.
CREATE TABLE bluesky (
    data JSONB COMPRESSION lz4 NOT NULL
);
CREATE INDEX idx_bluesky
ON bluesky (
    (data ->> 'kind'),
    (data -> 'commit' ->> 'operation'),
    (data -> 'commit' ->> 'collection'),
    (data ->> 'did'),
    (TO_TIMESTAMP((data ->> 'time_us')::BIGINT / 1000000.0))
);
