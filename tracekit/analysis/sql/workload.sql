-- workload.sql: what kind of run this is, so that advice fits it (decode advice only for decode).

-- Attention calls with recorded shapes: query and key lengths per call (PyTorch SDPA / flash /
-- efficient attention ops; `bhsd` ops hold [batch, heads, seq, dim], `bshd` ops [batch, seq, heads, dim]).
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column name VARCHAR the op
-- @column start_ns BIGINT op start (ns, host clock)
-- @column batch BIGINT batch size B
-- @column q_len BIGINT query length Sq (tokens per sequence processed by this call)
-- @column kv_len BIGINT key/value length Sk (context attended over)
CREATE OR REPLACE TEMP VIEW attention_calls AS
WITH a AS (
  SELECT run_id, rank, name, start_ns, input_dims,
         CASE WHEN name IN ('aten::_flash_attention_forward', 'aten::_efficient_attention_forward')
              THEN 1 ELSE 2 END AS seq_at
  FROM ops
  WHERE name IN ('aten::scaled_dot_product_attention', 'aten::_scaled_dot_product_attention_math',
                 'aten::_scaled_dot_product_flash_attention', 'aten::_scaled_dot_product_flash_attention_for_cpu',
                 'aten::_scaled_dot_product_efficient_attention', 'aten::_scaled_dot_product_cudnn_attention',
                 'aten::_flash_attention_forward', 'aten::_efficient_attention_forward')
    AND input_dims IS NOT NULL AND in_scope(run_id) AND json_valid(input_dims))
SELECT run_id, rank, name, start_ns,
       TRY_CAST(json_extract(input_dims, '$[0][0]') AS BIGINT) AS batch,
       TRY_CAST(json_extract(input_dims, '$[0][' || seq_at || ']') AS BIGINT) AS q_len,
       TRY_CAST(json_extract(input_dims, '$[1][' || seq_at || ']') AS BIGINT) AS kv_len
FROM a;

-- One row per run: the kind of workload and the evidence for it. Rules, first match wins:
-- `graph_capture` (at least half of the kernel-launch calls lie inside StreamBeginCapture …
-- EndCapture: the trace records a CUDA/HIP graph being captured, its launches run nothing);
-- `training` (backward or optimizer evidence: autograd / *Backward ops, Optimizer.step#,
-- ## backward ## annotations, TensorFlow's gradient_tape name scope, or, in a trace without host
-- ops, ≥ 10 kernels named for a backward pass);
-- `serving` (step markers of vLLM / SGLang / TensorRT-LLM / execute_model / decode_step);
-- `diffusion` (annotation or op names naming a diffusion pipeline: diffusion, unet, denoise, sd3, flux);
-- `generation` (no serving marker, but token generation by structure: ≥ 8 attention calls with
-- Sq ≤ 16 over ≥ 4 distinct, growing KV lengths, i.e. a KV cache being extended step by step);
-- `vision` (convolution ops, nothing above); `inference` (anything else with device work);
-- `host_only` (no device work).
-- Decode is claimed (has_decode) only on a serving marker whose phase is decode or mixed, or on
-- the structural generation evidence: never from a name that merely contains "decode" and never
-- from small GEMMs alone.
-- @column run_id VARCHAR the run
-- @column workload VARCHAR graph_capture | training | serving | diffusion | generation | vision | inference | host_only
-- @column has_decode BOOLEAN decode steps are present (marker or structure)
-- @column decode_evidence VARCHAR what the decode claim rests on, NULL when none
-- @column n_steps BIGINT steps (view steps) of the run
-- @column n_decode_steps BIGINT steps whose marker says decode
-- @column n_prefill_steps BIGINT steps whose marker says prefill (or extend)
-- @column n_mixed_steps BIGINT steps whose marker says mixed prefill + decode
-- @column evidence VARCHAR one line on why the workload was chosen
CREATE OR REPLACE TEMP VIEW run_workload AS
WITH r AS (SELECT run_id FROM runs WHERE in_scope(run_id)),
st AS (
  SELECT run_id, count(*) AS n_steps,
         count(*) FILTER (WHERE phase = 'decode') AS n_decode,
         count(*) FILTER (WHERE phase = 'prefill') AS n_prefill,
         count(*) FILTER (WHERE phase = 'mixed') AS n_mixed,
         bool_or(family IN ('vllm', 'sglang', 'trtllm', 'phase', 'execute_model')) AS serving,
         -- the first decode (or mixed) step's marker: one answer, whatever the order rows are read in
         arg_min(name, [CASE WHEN phase IN ('decode', 'mixed') THEN 0 ELSE 1 END, host_start_ns, rank]) AS decode_marker
  FROM steps GROUP BY run_id),
cap AS (
  SELECT c.run_id,
         count(*) FILTER (WHERE EXISTS (
           SELECT 1 FROM idle_cause_spans s
           WHERE s.run_id = c.run_id AND s.rank = c.rank AND s.cause_kind = 'graph_capture'
             AND c.start_ns >= s.start_ns AND c.start_ns < s.end_ns)) AS in_capture,
         count(*) AS launches
  FROM runtime_calls_in_scope c WHERE c.api_kind = 'kernel_launch' AND in_scope(c.run_id) GROUP BY c.run_id),
host AS (
  SELECT run_id,
         count(*) FILTER (WHERE name LIKE 'autograd::engine::evaluate_function%' OR name LIKE '%Backward%'
                          OR name LIKE 'Optimizer.step#%' OR name = '## backward ##'
                          OR (category = 'name_scope' AND name = 'gradient_tape')) AS n_train,
         count(*) FILTER (WHERE regexp_matches(lower(name), 'diffusion|unet|denois|(^|[^a-z])sd3|flux'))
           AS n_diffusion,
         count(*) FILTER (WHERE name IN ('aten::conv2d', 'aten::convolution', 'aten::cudnn_convolution',
                                         'aten::miopen_convolution', 'aten::conv3d')) AS n_conv,
         count(*) AS n_host
  FROM host_events WHERE category IN ('op', 'annotation', 'step', 'name_scope') AND in_scope(run_id) GROUP BY run_id),
dev AS (  -- the name regex once per distinct kernel name
  SELECT run_id, sum(n) AS n_rows,
         sum(n) FILTER (WHERE regexp_matches(lower(name), 'backward|_bwd|bwd_|wgrad|dgrad')) AS n_bwd
  FROM (SELECT run_id, name, count(*) AS n FROM device_work GROUP BY run_id, name) GROUP BY run_id),
gen AS (
  SELECT run_id, count(*) AS n_calls, count(DISTINCT kv_len) AS n_kv, min(kv_len) AS kv_min, max(kv_len) AS kv_max,
         max(q_len) AS q_max
  FROM attention_calls WHERE q_len <= 16 GROUP BY run_id),
j AS (
  SELECT r.run_id, st.n_steps, st.n_decode, st.n_prefill, st.n_mixed, coalesce(st.serving, false) AS serving,
         st.decode_marker, cap.in_capture, cap.launches, coalesce(host.n_train, 0) AS n_train,
         coalesce(host.n_diffusion, 0) AS n_diffusion, coalesce(host.n_conv, 0) AS n_conv,
         coalesce(host.n_host, 0) AS n_host, coalesce(dev.n_rows, 0) AS n_rows, coalesce(dev.n_bwd, 0) AS n_bwd,
         gen.n_calls, gen.n_kv, gen.kv_min, gen.kv_max, gen.q_max,
         coalesce(gen.n_calls >= 8 AND gen.n_kv >= 4 AND gen.kv_max > gen.kv_min, false) AS generates
  FROM r LEFT JOIN st USING (run_id) LEFT JOIN cap USING (run_id) LEFT JOIN host USING (run_id)
  LEFT JOIN dev USING (run_id) LEFT JOIN gen USING (run_id))
SELECT run_id,
       CASE WHEN coalesce(launches > 0 AND in_capture >= 0.5 * launches, false) THEN 'graph_capture'
            WHEN n_train > 0 OR (n_host = 0 AND n_bwd >= 10) THEN 'training'
            WHEN serving THEN 'serving'
            WHEN n_diffusion > 0 THEN 'diffusion'
            WHEN generates THEN 'generation'
            WHEN n_conv > 0 THEN 'vision'
            WHEN n_rows > 0 THEN 'inference'
            ELSE 'host_only' END AS workload,
       NOT (coalesce(launches > 0 AND in_capture >= 0.5 * launches, false)) AND n_train = 0
         AND coalesce((serving AND (n_decode > 0 OR n_mixed > 0)) OR (NOT serving AND generates), false) AS has_decode,
       CASE WHEN coalesce(launches > 0 AND in_capture >= 0.5 * launches, false) OR n_train > 0 THEN NULL
            WHEN serving AND (n_decode > 0 OR n_mixed > 0) THEN 'step marker ' || decode_marker
            WHEN NOT serving AND generates
              THEN printf('attention over a growing KV cache: %d calls with Sq <= %d over %d KV lengths %d..%d',
                          n_calls, q_max, n_kv, kv_min, kv_max) END AS decode_evidence,
       coalesce(n_steps, 0) AS n_steps, coalesce(n_decode, 0) AS n_decode_steps,
       coalesce(n_prefill, 0) AS n_prefill_steps, coalesce(n_mixed, 0) AS n_mixed_steps,
       CASE WHEN coalesce(launches > 0 AND in_capture >= 0.5 * launches, false)
              THEN printf('%d of %d kernel-launch calls inside stream capture', in_capture, launches)
            WHEN n_train > 0 THEN printf('%d backward/optimizer ops or annotations', n_train)
            WHEN n_host = 0 AND n_bwd >= 10 THEN printf('%d backward kernels (no host ops in the trace)', n_bwd)
            WHEN serving THEN printf('%d serving step markers (%d decode, %d prefill, %d mixed)', n_steps, n_decode, n_prefill, n_mixed)
            WHEN n_diffusion > 0 THEN printf('%d diffusion-pipeline annotations/ops', n_diffusion)
            WHEN generates THEN 'token generation by structure'
            WHEN n_conv > 0 THEN printf('%d convolution ops', n_conv)
            WHEN n_rows > 0 THEN 'device work without training, serving or generation evidence'
            ELSE 'no device work' END AS evidence
FROM j;

-- Whether the trace is complete enough to judge its timeline. A trace cut down by its author or
-- sampled by a tool (a subset of events kept) shows "idle" where events were dropped, so timeline
-- verdicts (idle, exposed communication) must not be drawn from it. Incomplete when, outside a
-- graph capture, at least 20 % of ≥ 20 kernel-launch calls have no device row although their
-- correlation id lies inside the span of the rank's device rows' ids, or when the ops
-- kept cover under 5 % of the External-id range they span (≥ 1,000 ops; Kineto numbers every op).
-- @column run_id VARCHAR the run
-- @column launch_calls BIGINT kernel-launch runtime calls
-- @column launches_without_work BIGINT those with no device row (same correlation id) whose id lies within the rank's device rows' id span
-- @column op_id_coverage DOUBLE distinct op External ids ÷ their id range, on the least covered rank (NULL without ids)
-- @column incomplete BOOLEAN timeline verdicts are not drawn from this run
-- @column note VARCHAR why, in one line (NULL when complete)
CREATE OR REPLACE TEMP VIEW run_completeness AS
WITH ids AS (  -- the correlation ids the rank's device rows span: a window cut from a longer capture
               -- ends with launches still queued (ids above) and starts with work launched before it
               -- (ids below); only a launch inside the span without its device row is a lost event
  SELECT run_id, rank, min(correlation_id) AS lo, max(correlation_id) AS hi FROM device_work
  WHERE correlation_id IS NOT NULL AND in_scope(run_id) GROUP BY run_id, rank),
l AS (
  SELECT c.run_id, count(*) AS launch_calls,
         count(*) FILTER (WHERE c.correlation_id BETWEEN i.lo AND i.hi AND NOT EXISTS (
           SELECT 1 FROM device_work w WHERE w.run_id = c.run_id AND w.rank = c.rank
                                         AND w.correlation_id = c.correlation_id)) AS without_work
  FROM runtime_calls_in_scope c LEFT JOIN ids i ON i.run_id = c.run_id AND i.rank = c.rank
  WHERE c.api_kind = 'kernel_launch' AND in_scope(c.run_id) GROUP BY c.run_id),
o AS (  -- per rank (External ids are numbered per process), the least covered rank
  SELECT run_id, sum(n_ops) AS n_ops, min(coverage) AS coverage
  FROM (SELECT run_id, rank, count(*) AS n_ops,
               count(DISTINCT external_id) / nullif(max(external_id) - min(external_id) + 1, 0) AS coverage
        FROM ops WHERE external_id IS NOT NULL AND in_scope(run_id) GROUP BY run_id, rank)
  GROUP BY run_id),
j AS (
  SELECT r.run_id, coalesce(l.launch_calls, 0) AS launch_calls, coalesce(l.without_work, 0) AS without_work,
         o.n_ops, o.coverage, w.workload
  FROM runs r LEFT JOIN l USING (run_id) LEFT JOIN o USING (run_id) LEFT JOIN run_workload w USING (run_id)
  WHERE in_scope(r.run_id))
SELECT run_id, launch_calls, without_work AS launches_without_work, coverage AS op_id_coverage,
       coalesce((workload <> 'graph_capture' AND launch_calls >= 20 AND without_work >= 0.2 * launch_calls)
                OR (n_ops >= 1000 AND coverage < 0.05), false) AS incomplete,
       CASE WHEN workload <> 'graph_capture' AND launch_calls >= 20 AND without_work >= 0.2 * launch_calls
              THEN printf('%d of %d kernel-launch calls have no device row with their correlation id: the trace was cut or sampled, or its ids do not link',
                          without_work, launch_calls)
            WHEN n_ops >= 1000 AND coverage < 0.05
              THEN printf('the %d ops kept cover %.1f%% of the op ids they span (least covered rank): a sampled trace', n_ops, 100 * coverage)
       END AS note
FROM j;
