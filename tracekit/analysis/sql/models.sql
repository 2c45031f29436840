-- models.sql: what each step must move and compute, from the model attached to the run
-- (`tracekit ingest|analyze|capture --model`, the `run_models` view) and the tokens its step
-- marker states (`steps`). The formulas are written up in docs/findings.md (model-aware costing).

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
-- @column tokens BIGINT new tokens the step processed (steps.new_tokens)
-- @column decode_seqs BIGINT requests decoding one token
-- @column prefill_tokens BIGINT new tokens of prefilling requests
-- @column sampled_seqs BIGINT sequences whose logits the step computes (decode + prefill requests; the tokens when the marker gives no requests)
-- @column context_tokens BIGINT Σ context the decoding requests attend over (NULL: not stated)
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
WITH s AS (
  SELECT s.run_id, s.rank, s.step, s.phase, m.model, m.tensor_parallel, s.new_tokens AS tokens,
         CASE s.phase WHEN 'decode' THEN coalesce(s.decode_seqs, s.batch_size, s.new_tokens)
                      WHEN 'prefill' THEN 0 ELSE s.decode_seqs END AS decode_seqs,
         CASE s.phase WHEN 'prefill' THEN coalesce(s.prefill_tokens, s.new_tokens)
                      WHEN 'decode' THEN 0 ELSE s.prefill_tokens END AS prefill_tokens,
         CASE s.phase WHEN 'decode' THEN 0 ELSE s.prefill_seqs END AS prefill_seqs,
         s.batch_size, s.context_tokens, s.prefill_context_tokens, s.prefill_attention_pairs,
         s.step_time_ns, s.kernel_time_ns, m.* EXCLUDE (run_id, model, tensor_parallel, spec)
  FROM steps s JOIN run_models m USING (run_id)
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
SELECT run_id, rank, step, phase, model, tensor_parallel, tokens, decode_seqs, prefill_tokens, sampled_seqs,
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
