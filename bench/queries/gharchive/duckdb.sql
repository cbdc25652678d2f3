-- Also the reference queries, run over a view on the raw NDJSON file.
SELECT j->>'$.repo.name' AS repo, count(*) AS count FROM gharchive WHERE j->>'$.type' = 'IssuesEvent' AND j->>'$.payload.action' = 'opened' GROUP BY repo ORDER BY count DESC, repo LIMIT 100;
SELECT j->>'$.type' AS type, count(*) AS count FROM gharchive GROUP BY type ORDER BY count DESC, type;
SELECT j->>'$.actor.login' AS actor, count(*) AS count FROM gharchive GROUP BY actor ORDER BY count DESC, actor LIMIT 10;
SELECT j->>'$.repo.name' AS repo, avg(CAST(j->>'$.payload.issue.comments' AS DOUBLE)) AS avg_comments FROM gharchive WHERE j->>'$.type' = 'PushEvent' AND j->>'$.payload.issue.comments' IS NOT NULL GROUP BY repo ORDER BY avg_comments DESC, repo LIMIT 100;
