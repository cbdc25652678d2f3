-- JSONBench's DuckDB queries (duckdb/queries.sql) with the changes made in every dialect (tie-breaks,
-- integer-millisecond Q5 span), and timestamps built exactly with make_timestamp(µs) instead of
-- TO_TIMESTAMP(µs / 1e6), which goes through a double and can be off by a microsecond.
-- These are also the reference queries, run over a view on the raw NDJSON file.
SELECT j->>'$.commit.collection' AS event, count(*) AS count FROM bluesky GROUP BY event ORDER BY count DESC, event;
SELECT j->>'$.commit.collection' AS event, count(*) AS count, count(DISTINCT j->>'$.did') AS users FROM bluesky WHERE j->>'$.kind' = 'commit' AND j->>'$.commit.operation' = 'create' GROUP BY event ORDER BY count DESC, event;
SELECT j->>'$.commit.collection' AS event, hour(make_timestamp(CAST(j->>'$.time_us' AS BIGINT))) AS hour_of_day, count(*) AS count FROM bluesky WHERE j->>'$.kind' = 'commit' AND j->>'$.commit.operation' = 'create' AND j->>'$.commit.collection' IN ('app.bsky.feed.post', 'app.bsky.feed.repost', 'app.bsky.feed.like') GROUP BY event, hour_of_day ORDER BY hour_of_day, event;
SELECT j->>'$.did' AS user_id, min(make_timestamp(CAST(j->>'$.time_us' AS BIGINT))) AS first_post_ts FROM bluesky WHERE j->>'$.kind' = 'commit' AND j->>'$.commit.operation' = 'create' AND j->>'$.commit.collection' = 'app.bsky.feed.post' GROUP BY user_id ORDER BY first_post_ts ASC, user_id LIMIT 3;
SELECT j->>'$.did' AS user_id, (max(CAST(j->>'$.time_us' AS BIGINT)) - min(CAST(j->>'$.time_us' AS BIGINT))) // 1000 AS activity_span FROM bluesky WHERE j->>'$.kind' = 'commit' AND j->>'$.commit.operation' = 'create' AND j->>'$.commit.collection' = 'app.bsky.feed.post' GROUP BY user_id ORDER BY activity_span DESC, user_id LIMIT 3;
