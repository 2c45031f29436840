-- Schema 5 → 6 (issue 21): the load's sessions and prefix-cache hits per request (agentic multi-turn
-- traffic), and the server's Prometheus metrics scraped during a capture window. Frozen: the columns and
-- table as schema 6 created them; later changes are later steps. Additive: rows of older writers read NULL.
ALTER TABLE request_rows ADD COLUMN session_id BIGINT;
ALTER TABLE request_rows ADD COLUMN turn INTEGER;
ALTER TABLE request_rows ADD COLUMN cached_tokens BIGINT;
CREATE TABLE server_metric_rows (run_id VARCHAR NOT NULL, t_ns BIGINT NOT NULL, name VARCHAR NOT NULL,
                                 labels VARCHAR NOT NULL, value DOUBLE);
