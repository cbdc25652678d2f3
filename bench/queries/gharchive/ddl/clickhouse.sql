-- Same layout as JSONBench's ClickHouse DDL: JSON column, the sort-key paths typed, ORDER BY over them.
CREATE TABLE gharchive
(
    `data` JSON(
        max_dynamic_paths = 0,
        type LowCardinality(String),
        repo.name String,
        created_at String) CODEC(ZSTD(1))
)
ORDER BY (data.type, data.repo.name, data.created_at)
SETTINGS object_serialization_version = 'v3',
         dynamic_serialization_version = 'v3',
         object_shared_data_serialization_version = 'advanced',
         object_shared_data_serialization_version_for_zero_level_parts = 'map_with_buckets';
