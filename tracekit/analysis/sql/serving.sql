-- serving.sql: what the server itself said during a load-driven capture (its Prometheus metrics) and
-- how time to first token grows with an agentic session's context.

-- One row per scrape and server quantity: the server's Prometheus samples under one name per quantity,
-- whichever engine exposed them. Where an engine exposes a quantity under several names (vLLM renamed
-- metrics and keeps the old spelling for a while), only the most preferred name it exposed in the run is
-- read, so aliases are never added up. Across label sets (engines, data-parallel ranks, SGLang's
-- `cache_source`): gauges of counts are summed, fractions averaged, KV-cache usage takes the fullest engine;
-- counters are differenced per series first (a drop is a restart and counts from 0, as Prometheus'
-- `increase()`), then the increases summed.
-- Quantities (preferred name first): `prefix_cache_queries` and `prefix_cache_hits` (counters, prompt
-- tokens: vLLM `vllm:prefix_cache_queries_total` / `…_hits_total`, older V1 `vllm:gpu_prefix_cache_…`;
-- SGLang `sglang:prompt_tokens_total` / `sglang:cached_tokens_total`), `hit_rate_gauge` (0..1: SGLang
-- `sglang:cache_hit_rate`, vLLM V0 `vllm:gpu_prefix_cache_hit_rate`), `kv_cache_usage` (0..1:
-- `vllm:kv_cache_usage_perc`, V0 `vllm:gpu_cache_usage_perc`, `sglang:token_usage`), `requests_waiting`
-- (`vllm:num_requests_waiting`, `sglang:num_queue_reqs`), `requests_running` (`vllm:num_requests_running`,
-- `sglang:num_running_reqs`), `generation_tokens` (counter, output tokens produced:
-- `vllm:generation_tokens_total`, `sglang:generation_tokens_total`), `preemptions` (counter, events: `vllm:num_preemptions_total`,
-- `sglang:num_retracted_requests_total`), `spec_draft_tokens` and `spec_accepted_tokens` (counters:
-- `vllm:spec_decode_num_draft_tokens_total` / `…_accepted_tokens_total`), `spec_accept_length` (gauge,
-- tokens per step: `sglang:spec_accept_length`).
-- @column run_id VARCHAR the run
-- @column t_ns BIGINT when the scrape was sent (ns, Unix time)
-- @column quantity VARCHAR the server quantity (above)
-- @column kind VARCHAR `counter` (cumulative since the server started) or `gauge`
-- @column value DOUBLE a gauge's value at the scrape (its unit: requests, fraction 0..1, tokens); a counter's
-- summed value over its series
-- @column increase DOUBLE counters: how much it grew since the previous scrape, summed over its series (tokens,
-- events); NULL for gauges and at the run's first scrape
CREATE OR REPLACE TEMP VIEW server_quantities AS
WITH m AS (
  SELECT * FROM (VALUES
    ('vllm:prefix_cache_queries_total', 'prefix_cache_queries', 'counter', 'sum', 1),
    ('vllm:prefix_cache_queries', 'prefix_cache_queries', 'counter', 'sum', 2),
    ('vllm:gpu_prefix_cache_queries_total', 'prefix_cache_queries', 'counter', 'sum', 3),
    ('vllm:gpu_prefix_cache_queries', 'prefix_cache_queries', 'counter', 'sum', 4),
    ('sglang:prompt_tokens_total', 'prefix_cache_queries', 'counter', 'sum', 5),
    ('vllm:prefix_cache_hits_total', 'prefix_cache_hits', 'counter', 'sum', 1),
    ('vllm:prefix_cache_hits', 'prefix_cache_hits', 'counter', 'sum', 2),
    ('vllm:gpu_prefix_cache_hits_total', 'prefix_cache_hits', 'counter', 'sum', 3),
    ('vllm:gpu_prefix_cache_hits', 'prefix_cache_hits', 'counter', 'sum', 4),
    ('sglang:cached_tokens_total', 'prefix_cache_hits', 'counter', 'sum', 5),
    ('sglang:cache_hit_rate', 'hit_rate_gauge', 'gauge', 'avg', 1),
    ('vllm:gpu_prefix_cache_hit_rate', 'hit_rate_gauge', 'gauge', 'avg', 2),
    ('vllm:kv_cache_usage_perc', 'kv_cache_usage', 'gauge', 'max', 1),
    ('vllm:gpu_cache_usage_perc', 'kv_cache_usage', 'gauge', 'max', 2),
    ('sglang:token_usage', 'kv_cache_usage', 'gauge', 'max', 3),
    ('vllm:num_requests_waiting', 'requests_waiting', 'gauge', 'sum', 1),
    ('sglang:num_queue_reqs', 'requests_waiting', 'gauge', 'sum', 2),
    ('vllm:num_requests_running', 'requests_running', 'gauge', 'sum', 1),
    ('sglang:num_running_reqs', 'requests_running', 'gauge', 'sum', 2),
    ('vllm:num_preemptions_total', 'preemptions', 'counter', 'sum', 1),
    ('vllm:num_preemptions', 'preemptions', 'counter', 'sum', 2),
    ('sglang:num_retracted_requests_total', 'preemptions', 'counter', 'sum', 3),
    ('vllm:generation_tokens_total', 'generation_tokens', 'counter', 'sum', 1),
    ('vllm:generation_tokens', 'generation_tokens', 'counter', 'sum', 2),
    ('sglang:generation_tokens_total', 'generation_tokens', 'counter', 'sum', 3),
    ('vllm:spec_decode_num_draft_tokens_total', 'spec_draft_tokens', 'counter', 'sum', 1),
    ('vllm:spec_decode_num_accepted_tokens_total', 'spec_accepted_tokens', 'counter', 'sum', 1),
    ('sglang:spec_accept_length', 'spec_accept_length', 'gauge', 'avg', 1)
  ) AS t(name, quantity, kind, combine, pref)),
x AS (
  SELECT s.run_id, s.t_ns, s.name, s.labels, s.value, m.quantity, m.kind, m.combine, m.pref,
         min(m.pref) OVER (PARTITION BY s.run_id, m.quantity) AS best
  FROM server_metrics s JOIN m ON m.name = s.name
  WHERE s.value IS NOT NULL AND in_scope(s.run_id)),
d AS (
  SELECT *, CASE WHEN kind = 'counter' THEN
              CASE WHEN lag(value) OVER w IS NULL THEN NULL
                   WHEN value >= lag(value) OVER w THEN value - lag(value) OVER w ELSE value END END AS inc,
         min(t_ns) OVER (PARTITION BY run_id) AS first_ns
  FROM x WHERE pref = best
  WINDOW w AS (PARTITION BY run_id, name, labels ORDER BY t_ns))
SELECT run_id, t_ns, quantity, any_value(kind) AS kind,
       CASE any_value(combine) WHEN 'sum' THEN sum(value) WHEN 'max' THEN max(value) ELSE avg(value) END AS value,
       CASE WHEN any_value(kind) = 'counter' AND t_ns > any_value(first_ns) THEN coalesce(sum(inc), 0) END AS increase
FROM d
GROUP BY run_id, t_ns, quantity;

-- One row per run with server metrics: the window's server-side figures. Counters count what happened
-- between the first and the last scrape (the sum of their increases, above); gauges are taken over the
-- scrapes. `prefix_cache_hit_rate` = Δ hits ÷ Δ queries (prompt tokens found in the prefix cache over prompt
-- tokens looked up: vLLM's prefix-cache counters, SGLang's cached and prompt tokens); without them, the mean of
-- the hit-rate gauge; NULL without either.
-- @column run_id VARCHAR the run
-- @column scrapes BIGINT scrapes in the window (with the one before it, the counters' baseline)
-- @column first_ns BIGINT the first scrape (ns, Unix time)
-- @column last_ns BIGINT the last scrape (ns, Unix time)
-- @column prefix_cache_queries DOUBLE prompt tokens looked up in the prefix cache in the window (tokens)
-- @column prefix_cache_hits DOUBLE of them, found cached (tokens)
-- @column prefix_cache_hit_rate DOUBLE hits ÷ queries (0..1), above
-- @column kv_cache_usage_p50 DOUBLE median KV-cache usage over the scrapes (fraction 0..1)
-- @column kv_cache_usage_p95 DOUBLE 95th percentile of KV-cache usage (fraction 0..1)
-- @column queue_depth_p95 DOUBLE 95th percentile of requests waiting to be scheduled (requests)
-- @column queue_depth_max DOUBLE most requests waiting at one scrape (requests)
-- @column running_p50 DOUBLE median requests running (requests)
-- @column preemptions DOUBLE preemptions in the window (KV cache full; events, a request can count twice)
-- @column spec_decode_acceptance_rate DOUBLE accepted ÷ drafted speculative tokens in the window (0..1; vLLM)
-- @column spec_accept_length DOUBLE mean accepted tokens per speculative step (tokens; SGLang)
-- @column output_tokens_per_s DOUBLE output tokens the server produced per second while the load ran
-- (tokens/s): Δ generation tokens from the window's first scrape to the first scrape after the last request
-- started (taken as the load stops), over that time; NULL without the counter or two such scrapes
CREATE OR REPLACE TEMP VIEW server_metric_summary AS
WITH counters AS (
  PIVOT (SELECT run_id, quantity, increase FROM server_quantities WHERE kind = 'counter')
  ON quantity IN ('prefix_cache_queries', 'prefix_cache_hits', 'preemptions', 'spec_draft_tokens',
                  'spec_accepted_tokens') USING sum(increase) GROUP BY run_id),
-- the load's own period: from the first scrape to the first one after the last request started
stop AS (
  SELECT q.run_id, min(q.t_ns) FILTER (WHERE q.t_ns >= r.last_start) AS stop_ns, min(q.t_ns) AS first_ns
  FROM server_quantities q
  JOIN (SELECT run_id, max(start_ns) AS last_start FROM requests WHERE in_scope(run_id) GROUP BY run_id) r
    USING (run_id)
  WHERE q.quantity = 'generation_tokens' GROUP BY q.run_id),
gen AS (
  SELECT q.run_id, sum(q.increase) / ((any_value(s.stop_ns) - any_value(s.first_ns)) / 1e9) AS tps
  FROM server_quantities q JOIN stop s USING (run_id)
  WHERE q.quantity = 'generation_tokens' AND q.t_ns > s.first_ns AND q.t_ns <= s.stop_ns
  GROUP BY q.run_id),
gauges AS (
  SELECT run_id,
         quantile_cont(value, 0.5) FILTER (WHERE quantity = 'kv_cache_usage') AS kv_p50,
         quantile_cont(value, 0.95) FILTER (WHERE quantity = 'kv_cache_usage') AS kv_p95,
         quantile_cont(value, 0.95) FILTER (WHERE quantity = 'requests_waiting') AS wait_p95,
         max(value) FILTER (WHERE quantity = 'requests_waiting') AS wait_max,
         quantile_cont(value, 0.5) FILTER (WHERE quantity = 'requests_running') AS run_p50,
         avg(value) FILTER (WHERE quantity = 'hit_rate_gauge') AS gauge_hit_rate,
         avg(value) FILTER (WHERE quantity = 'spec_accept_length') AS accept_length
  FROM server_quantities WHERE kind = 'gauge' GROUP BY run_id),
scr AS (
  SELECT run_id, count(DISTINCT t_ns) AS scrapes, min(t_ns) AS first_ns, max(t_ns) AS last_ns
  FROM server_metrics WHERE in_scope(run_id) GROUP BY run_id)
SELECT scr.run_id, scr.scrapes, scr.first_ns, scr.last_ns,
       c.prefix_cache_queries, c.prefix_cache_hits,
       CASE WHEN c.prefix_cache_queries > 0 AND c.prefix_cache_hits IS NOT NULL
            THEN c.prefix_cache_hits / c.prefix_cache_queries ELSE g.gauge_hit_rate END AS prefix_cache_hit_rate,
       g.kv_p50 AS kv_cache_usage_p50, g.kv_p95 AS kv_cache_usage_p95, g.wait_p95 AS queue_depth_p95,
       g.wait_max AS queue_depth_max, g.run_p50 AS running_p50, c.preemptions,
       CASE WHEN c.spec_draft_tokens > 0 THEN c.spec_accepted_tokens / c.spec_draft_tokens END
         AS spec_decode_acceptance_rate,
       g.accept_length AS spec_accept_length, gen.tps AS output_tokens_per_s
FROM scr LEFT JOIN counters c USING (run_id) LEFT JOIN gauges g USING (run_id) LEFT JOIN gen USING (run_id);

-- Time to first token by turn of the agentic load profile's sessions (requests without error): how the
-- tail grows as each turn re-sends a longer context. Sub-agent requests count under the turn they
-- branched from. Percentiles are DuckDB `quantile_cont` (linear interpolation).
-- @column run_id VARCHAR the run
-- @column turn INTEGER the turn within its session, from 0
-- @column requests BIGINT requests of that turn (all sessions)
-- @column prompt_tokens_mean DOUBLE mean prompt length (tokens)
-- @column cached_share DOUBLE prompt tokens served from the server's prefix cache ÷ prompt tokens, over the
-- requests whose server said (0..1; NULL when none did)
-- @column ttft_p50_ms DOUBLE median time to first token (ms)
-- @column ttft_p95_ms DOUBLE 95th percentile (ms)
-- @column ttft_p99_ms DOUBLE 99th percentile (ms)
CREATE OR REPLACE TEMP VIEW ttft_by_turn AS
SELECT run_id, turn, count(*) AS requests, avg(prompt_tokens) AS prompt_tokens_mean,
       sum(cached_tokens) / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0) AS cached_share,
       quantile_cont(ttft_ns, 0.5) / 1e6 AS ttft_p50_ms, quantile_cont(ttft_ns, 0.95) / 1e6 AS ttft_p95_ms,
       quantile_cont(ttft_ns, 0.99) / 1e6 AS ttft_p99_ms
FROM requests
WHERE turn IS NOT NULL AND error IS NULL AND ttft_ns IS NOT NULL AND in_scope(run_id)
GROUP BY run_id, turn;

-- One row per run measured under load (it has `requests` and the `serving` analyzer's metrics): what the
-- portfolio places on its curves (`tracekit portfolio`, docs/portfolio.md). `hardware` is the run's tag
-- `hardware` when set (name a server configuration so), else the name of its busiest device, else its vendor,
-- else `cpu`; `devices` is the serving instance: the devices that ran kernels in the trace (a Kineto trace
-- lists every device its process could see), or the trace's world size or the attached model's tensor
-- parallelism when larger, at least 1 (a CPU run counts its host as one device).
-- @column run_id VARCHAR the run
-- @column label VARCHAR its label
-- @column workload VARCHAR its workload name
-- @column captured_at TIMESTAMP capture time (UTC)
-- @column hardware VARCHAR tag `hardware`, else the busiest device's name, else the vendor, else `cpu`
-- @column hardware_tagged BOOLEAN whether `hardware` came from the tag
-- @column precision VARCHAR tag `precision`, else the attached model's weight format, else NULL
-- @column model VARCHAR tag `model`, else the attached model, else the model the load sent (tag `served_model`)
-- @column sweep_id VARCHAR tag `sweep_id` (`tracekit capture --sweep`), NULL outside a sweep
-- @column sweep_param VARCHAR tag `sweep_param`: `concurrency` or `rate`
-- @column sweep_value DOUBLE tag `sweep_value`: the point's clients (sessions) or request rate (req/s)
-- @column load_profile VARCHAR tag `load_profile`: `independent` or `agentic`
-- @column price_sheet VARCHAR tag `price_sheet` (`rented` or `owned`), NULL when untagged
-- @column steady_state VARCHAR tag `steady_state` of a sweep point: `reached`; `past_capacity` (open loop: requests
-- arrived faster than they completed in the window, beyond chance); `not_reached` (the warm-up's requests had not
-- completed by `--steady-timeout`); `interrupted`. NULL outside a sweep
-- @column devices BIGINT devices of the serving instance (above)
-- @column prompt_tokens_mean DOUBLE mean prompt length of the requests without error (tokens): the input length
-- @column output_tokens_mean DOUBLE mean output length of the requests without error (tokens)
-- @column output_tokens_per_s DOUBLE output tokens per second of the whole instance (tokens/s): the server's
-- own count while the load ran (metric `server_output_tokens_per_s`) when it was scraped, else the requests'
-- (metric `output_tokens_per_s`)
-- @column throughput_source VARCHAR `server` or `requests`: where `output_tokens_per_s` came from
-- @column output_tokens_per_s_per_device DOUBLE `output_tokens_per_s ÷ devices` (tokens/s)
-- @column output_tokens_per_s_per_user DOUBLE 1000 ÷ TPOT p50 (tokens/s): the speed one user sees
-- @column ttft_p95_ms DOUBLE time to first token, 95th percentile (ms)
-- @column tpot_p50_ms DOUBLE time per output token, median (ms)
-- @column request_error_rate DOUBLE failed requests ÷ requests (0..1)
-- @column usd_per_1m_output_tokens DOUBLE the `serving` analyzer's cost at the catalog price (USD), NULL unpriced
-- @column prefix_cache_hit_rate DOUBLE from the server's metrics (0..1), NULL without them
-- @column kv_cache_usage_p95 DOUBLE from the server's metrics (0..1)
-- @column queue_depth_p95 DOUBLE from the server's metrics (requests)
-- @column mbu DOUBLE memory-bandwidth utilization: decode MBU, else the costed one, else its lower bound (0..1)
-- @column mfu DOUBLE model FLOPs utilization: decode, else prefill, else costed, else its lower bound (0..1)
CREATE OR REPLACE TEMP VIEW portfolio_runs AS
WITH m AS (
  SELECT run_id, map_from_entries(list({'k': name, 'v': value})) AS v
  FROM metrics WHERE in_scope(run_id) GROUP BY run_id),
dev AS (
  SELECT d.run_id, d.name, d.vendor FROM devices d
  JOIN runs r ON r.run_id = d.run_id AND r.main_rank IS NOT DISTINCT FROM d.rank
   AND r.main_device IS NOT DISTINCT FROM d.device
  WHERE in_scope(d.run_id)),
req AS (
  SELECT run_id, avg(prompt_tokens) FILTER (WHERE error IS NULL) AS isl,
         avg(output_tokens) FILTER (WHERE error IS NULL) AS osl
  FROM requests WHERE in_scope(run_id) GROUP BY run_id),
n_dev AS (  -- the devices that ran kernels
  SELECT run_id, count(*) AS n
  FROM (SELECT DISTINCT run_id, rank, device FROM kernels WHERE run_id IN (SELECT run_id FROM req))
  GROUP BY run_id),
world AS (SELECT run_id, max(world_size) AS w FROM ranks GROUP BY run_id)
SELECT r.run_id, r.label, r.workload, r.captured_at,
       coalesce(r.tags['hardware'], dev.name, dev.vendor, 'cpu') AS hardware,
       r.tags['hardware'] IS NOT NULL AS hardware_tagged,
       coalesce(r.tags['precision'], json_extract_string(rm.spec, '$.weights_dtype')) AS precision,
       coalesce(r.tags['model'], rm.model, r.tags['served_model']) AS model,
       r.tags['sweep_id'] AS sweep_id, r.tags['sweep_param'] AS sweep_param,
       TRY_CAST(r.tags['sweep_value'] AS DOUBLE) AS sweep_value, r.tags['load_profile'] AS load_profile,
       r.tags['price_sheet'] AS price_sheet, r.tags['steady_state'] AS steady_state,
       greatest(coalesce(n_dev.n, 0), coalesce(world.w, 0), coalesce(rm.tensor_parallel, 0), 1) AS devices,
       req.isl AS prompt_tokens_mean, req.osl AS output_tokens_mean,
       coalesce(m.v['server_output_tokens_per_s'], m.v['output_tokens_per_s']) AS output_tokens_per_s,
       CASE WHEN m.v['server_output_tokens_per_s'] IS NOT NULL THEN 'server' ELSE 'requests' END AS throughput_source,
       coalesce(m.v['server_output_tokens_per_s'], m.v['output_tokens_per_s'])
         / greatest(coalesce(n_dev.n, 0), coalesce(world.w, 0), coalesce(rm.tensor_parallel, 0), 1)
         AS output_tokens_per_s_per_device,
       m.v['output_tokens_per_s_per_user'] AS output_tokens_per_s_per_user,
       m.v['ttft_p95_ms'] AS ttft_p95_ms, m.v['tpot_p50_ms'] AS tpot_p50_ms,
       m.v['request_error_rate'] AS request_error_rate,
       m.v['usd_per_1m_output_tokens'] AS usd_per_1m_output_tokens,
       m.v['prefix_cache_hit_rate'] AS prefix_cache_hit_rate, m.v['kv_cache_usage_p95'] AS kv_cache_usage_p95,
       m.v['queue_depth_p95'] AS queue_depth_p95,
       coalesce(m.v['decode_mbu'], m.v['costed_mbu'], m.v['mbu_lower_bound']) AS mbu,
       coalesce(m.v['decode_mfu'], m.v['prefill_mfu'], m.v['costed_mfu'], m.v['mfu_lower_bound']) AS mfu
FROM runs r
JOIN req USING (run_id)
JOIN m USING (run_id)
LEFT JOIN dev USING (run_id)
LEFT JOIN n_dev USING (run_id)
LEFT JOIN world USING (run_id)
LEFT JOIN run_models rm USING (run_id)
WHERE m.v['output_tokens_per_s'] IS NOT NULL AND in_scope(r.run_id);
