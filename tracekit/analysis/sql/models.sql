-- models.sql: what each step must move and compute, from the model attached to the run
-- (`tracekit ingest|analyze|capture --model`, the `run_models` view) and the tokens its step
-- marker states (`steps`). The formulas are written up in docs/findings.md (model-aware costing).

-- Tokens per decode step from the load driver's requests (`tracekit capture --load`), for runs
-- whose decode markers state no token counts: every token a request streamed (first token at
-- start + TTFT, then one per inter-token gap) inside the span of the run's decode steps, ÷ the
-- decode steps in that span. Each decode step emits one token per running sequence, so this is the
-- mean batch whatever the server (1 for a server that decodes requests one by one on threads).
-- The mean context per emitted token is its prompt + the tokens before it. Needs the trace's
-- Unix time (`start_ns + ranks.base_time_ns` after 2001): NULL rows for boot-time clocks (AMD).
-- @column run_id VARCHAR the run
-- @column decode_steps BIGINT decode steps (all ranks)
-- @column tokens BIGINT tokens the requests streamed inside the decode steps' span
-- @column tokens_per_step DOUBLE tokens ÷ decode steps (the mean batch)
-- @column mean_context DOUBLE mean context length (prompt + tokens already generated) of those tokens (tokens)
CREATE OR REPLACE TEMP VIEW request_decode_tokens AS
WITH s AS (
  SELECT s.run_id, min(s.host_start_ns + coalesce(r.base_time_ns, 0)) AS t0,
         max(s.host_end_ns + coalesce(r.base_time_ns, 0)) AS t1, count(*) AS n
  FROM steps s JOIN (SELECT run_id, rank, max(base_time_ns) AS base_time_ns FROM ranks GROUP BY ALL) r
    USING (run_id, rank)
  WHERE s.phase = 'decode' GROUP BY ALL
  HAVING min(s.host_start_ns + coalesce(r.base_time_ns, 0)) > 1000000000000000000),
g AS (
  SELECT run_id, request_id, prompt_tokens, start_ns + ttft_ns AS first_ns, unnest(itl_ns) AS gap,
         generate_subscripts(itl_ns, 1) AS i
  FROM requests WHERE error IS NULL AND ttft_ns IS NOT NULL AND run_id IN (SELECT run_id FROM s)),
tok AS (
  SELECT run_id, prompt_tokens AS context, start_ns + ttft_ns AS t FROM requests
  WHERE error IS NULL AND ttft_ns IS NOT NULL AND run_id IN (SELECT run_id FROM s)
  UNION ALL
  SELECT run_id, prompt_tokens + i AS context,
         first_ns + sum(gap) OVER (PARTITION BY run_id, request_id ORDER BY i) AS t
  FROM g)
SELECT s.run_id, s.n AS decode_steps, count(*) AS tokens, count(*) / s.n AS tokens_per_step,
       avg(tok.context) AS mean_context
FROM s JOIN tok ON tok.run_id = s.run_id AND tok.t BETWEEN s.t0 AND s.t1
GROUP BY s.run_id, s.n;

-- One row per step of a run with a model and a phase: bytes and FLOPs the step needs, as
-- modelled, per rank (weights and heads split over tensor_parallel ranks), and the rates they imply
-- over the device's busy time in the step. Bytes: the fixed weights (attention, dense MLP, shared experts, router,
-- norms, LM head) once; the routed experts its tokens touch (E·(1 − (1 − k/E)^T) distinct experts
-- per MoE layer for T tokens, routing taken as uniform: an upper estimate, skewed routing touches
-- fewer); the KV cache each request attends over
-- (global layers: every context token; sliding-window layers: at most the window per request);
-- the new tokens' KV written; the hidden-state activations between kernels (an estimate). FLOPs:
-- 2 × active parameters per token (LM head apart), the LM head once per sequence that samples,
-- and attention over the query-key pairs (decode: the context; prefill: the causal pairs).
-- A figure the markers do not allow is NULL: a decode step whose marker gives no context has no
-- KV bytes and so no total bytes.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column step BIGINT the step (steps.step)
-- @column phase VARCHAR decode | prefill | mixed
-- @column model VARCHAR the attached model (run_models.model)
-- @column tensor_parallel INTEGER ranks the weights are split over
-- @column tokens BIGINT new tokens the step processed (steps.new_tokens; decode steps whose marker says none: the mean batch from the requests, rounded)
-- @column tokens_source VARCHAR marker | requests (request_decode_tokens)
-- @column decode_seqs BIGINT requests decoding one token
-- @column prefill_tokens BIGINT new tokens of prefilling requests
-- @column sampled_seqs BIGINT sequences whose logits the step computes (decode + prefill requests; the tokens when the marker gives no requests)
-- @column context_tokens BIGINT Σ context the decoding requests attend over (NULL: not stated; from the requests: the batch × their mean context)
-- @column experts_touched DOUBLE expected distinct routed experts per MoE layer (0 for dense models)
-- @column weight_bytes DOUBLE weights read once by the step (B, per rank)
-- @column kv_read_bytes DOUBLE KV cache read by attention (B, per rank; NULL when a decode context is not stated)
-- @column kv_write_bytes DOUBLE KV cache written for the new tokens (B, per rank)
-- @column activation_bytes DOUBLE hidden-state traffic between kernels, an estimate (B, per rank)
-- @column bytes DOUBLE Σ of the four (B, per rank)
-- @column attention_flops DOUBLE the attention part of flops (per rank)
-- @column flops DOUBLE FLOPs of the step (per rank)
-- @column step_time_ns BIGINT the step time (steps.step_time_ns, ns)
-- @column kernel_time_ns BIGINT Σ device time of the step's rows (ns)
-- @column busy_ns BIGINT the device's busy time in the step: least(kernel_time_ns, step_time_ns) (ns; the rows' sum, unless streams overlap)
-- @column bytes_per_s DOUBLE bytes ÷ busy_ns: the bandwidth the step achieved while the device worked (B/s)
-- @column flops_per_s DOUBLE flops ÷ busy_ns (FLOP/s)
CREATE OR REPLACE TEMP VIEW step_costs AS
WITH rq AS (  -- decode steps without token counts: the requests' mean batch and context
  SELECT run_id, greatest(1, round(tokens_per_step))::BIGINT AS tokens, mean_context FROM request_decode_tokens),
st AS (
  SELECT s.* REPLACE (
           coalesce(s.new_tokens, CASE WHEN s.phase = 'decode' THEN rq.tokens END) AS new_tokens,
           coalesce(s.context_tokens, CASE WHEN s.phase = 'decode' AND s.new_tokens IS NULL
                                           THEN round(rq.tokens * rq.mean_context)::BIGINT END) AS context_tokens),
         CASE WHEN s.new_tokens IS NOT NULL THEN 'marker' WHEN rq.tokens IS NOT NULL THEN 'requests' END
           AS tokens_source
  FROM steps s LEFT JOIN rq ON rq.run_id = s.run_id AND s.phase = 'decode'),
s AS (
  SELECT s.run_id, s.rank, s.step, s.phase, m.model, m.tensor_parallel, s.new_tokens AS tokens, s.tokens_source,
         CASE s.phase WHEN 'decode' THEN coalesce(s.decode_seqs, s.batch_size, s.new_tokens)
                      WHEN 'prefill' THEN 0 ELSE s.decode_seqs END AS decode_seqs,
         CASE s.phase WHEN 'prefill' THEN coalesce(s.prefill_tokens, s.new_tokens)
                      WHEN 'decode' THEN 0 ELSE s.prefill_tokens END AS prefill_tokens,
         CASE s.phase WHEN 'decode' THEN 0 ELSE s.prefill_seqs END AS prefill_seqs,
         s.batch_size, s.context_tokens, s.prefill_context_tokens, s.prefill_attention_pairs,
         s.step_time_ns, s.kernel_time_ns, m.* EXCLUDE (run_id, model, tensor_parallel, spec)
  FROM st s JOIN run_models m USING (run_id)
  WHERE s.phase IN ('decode', 'prefill', 'mixed') AND s.new_tokens > 0),
c AS (
  SELECT *,
         coalesce(decode_seqs + prefill_seqs, batch_size, tokens) AS sampled_seqs,
         CASE WHEN num_experts > 0
              THEN num_experts * (1 - pow(1 - experts_per_token / num_experts, tokens)) ELSE 0 END AS experts_touched,
         -- decode: each request attends over its context; sliding layers over at most the window
         CASE WHEN coalesce(decode_seqs, 0) = 0 THEN 0 ELSE context_tokens END AS dec_ctx,
         CASE WHEN coalesce(decode_seqs, 0) = 0 THEN 0
              ELSE least(context_tokens, decode_seqs * sliding_window) END AS dec_ctx_window,
         -- prefill: keys read once per request (their new tokens included); causal pairs, else
         -- (no sums in the marker) every request taken as equally long with no earlier context
         coalesce(prefill_context_tokens, prefill_tokens) AS pre_keys,
         coalesce(prefill_attention_pairs,
                  prefill_tokens * (prefill_tokens / greatest(coalesce(prefill_seqs, 1), 1) + 1) / 2) AS pre_pairs
  FROM s)
SELECT run_id, rank, step, phase, model, tensor_parallel, tokens, tokens_source, decode_seqs, prefill_tokens,
       sampled_seqs,
       context_tokens, experts_touched,
       weight_bytes_fixed + experts_touched * expert_bytes AS weight_bytes,
       dec_ctx * kv_bytes_per_token_global + dec_ctx_window * kv_bytes_per_token_window
         + coalesce(pre_keys, 0) * kv_bytes_per_token_global
         + least(coalesce(pre_keys, 0), coalesce(prefill_tokens, 0) + coalesce(prefill_seqs, 1) * sliding_window)
           * kv_bytes_per_token_window AS kv_read_bytes,
       tokens * (kv_bytes_per_token_global + kv_bytes_per_token_window) AS kv_write_bytes,
       tokens * activation_bytes_per_token AS activation_bytes,
       weight_bytes + kv_read_bytes + kv_write_bytes + activation_bytes AS bytes,
       (dec_ctx + coalesce(pre_pairs, 0)) * attn_flops_per_pair_global
         + (dec_ctx_window + least(coalesce(pre_pairs, 0), coalesce(prefill_tokens, 0) * sliding_window))
           * attn_flops_per_pair_window AS attention_flops,
       tokens * flops_per_token + sampled_seqs * lm_head_flops_per_seq + attention_flops AS flops,
       step_time_ns, kernel_time_ns, least(kernel_time_ns, step_time_ns) AS busy_ns,
       bytes / (busy_ns / 1e9) AS bytes_per_s,
       flops / (busy_ns / 1e9) AS flops_per_s
FROM c;
