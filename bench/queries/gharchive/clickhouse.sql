-- Paths outside the typed sort key are Dynamic: read them as String / Float64 subcolumns.
SELECT data.repo.name AS repo, count() AS count FROM gharchive WHERE data.type = 'IssuesEvent' AND data.payload.action.:String = 'opened' GROUP BY repo ORDER BY count DESC, repo LIMIT 100;
SELECT data.type AS type, count() AS count FROM gharchive GROUP BY type ORDER BY count DESC, type;
SELECT data.actor.login.:String AS actor, count() AS count FROM gharchive GROUP BY actor ORDER BY count DESC, actor LIMIT 10;
SELECT data.repo.name AS repo, avg(data.payload.issue.comments::Nullable(Float64)) AS avg_comments FROM gharchive WHERE data.type = 'PushEvent' AND data.payload.issue.comments IS NOT NULL GROUP BY repo ORDER BY avg_comments DESC, repo LIMIT 100;
