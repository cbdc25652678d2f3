-- As in the study: jsonb, with an index on every path the queries use (the sort key as one index).
CREATE TABLE gharchive (
    data JSONB COMPRESSION lz4 NOT NULL
);
CREATE INDEX idx_gharchive_key ON gharchive ((data ->> 'type'), (data -> 'repo' ->> 'name'), (data ->> 'created_at'));
CREATE INDEX idx_gharchive_action ON gharchive ((data -> 'payload' ->> 'action'));
CREATE INDEX idx_gharchive_actor ON gharchive ((data -> 'actor' ->> 'login'));
CREATE INDEX idx_gharchive_comments ON gharchive (((data -> 'payload' -> 'issue' ->> 'comments')::DOUBLE PRECISION));
