CREATE TABLE gharchive (j JSON);
