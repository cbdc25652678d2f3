SELECT data->'repo'->>'name' AS repo, COUNT(*) AS count FROM gharchive WHERE data->>'type' = 'IssuesEvent' AND data->'payload'->>'action' = 'opened' GROUP BY repo ORDER BY count DESC, repo LIMIT 100;
SELECT data->>'type' AS type, COUNT(*) AS count FROM gharchive GROUP BY type ORDER BY count DESC, type;
SELECT data->'actor'->>'login' AS actor, COUNT(*) AS count FROM gharchive GROUP BY actor ORDER BY count DESC, actor LIMIT 10;
SELECT data->'repo'->>'name' AS repo, AVG((data->'payload'->'issue'->>'comments')::DOUBLE PRECISION) AS avg_comments FROM gharchive WHERE data->>'type' = 'PushEvent' AND (data->'payload'->'issue'->>'comments') IS NOT NULL GROUP BY repo ORDER BY avg_comments DESC, repo LIMIT 100;
